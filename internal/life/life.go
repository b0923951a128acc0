// Package life gives an owner with background work (a dogpile Cache) a
// Close that stops it and waits for it: no goroutine outlives Close.
package life

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Life is what a Close ends: the background goroutines of its owner
// (a Cache), and the contexts they run with. Init it before use.
type Life struct {
	ctx    context.Context // ends at Close, with the cause given to Init
	cancel context.CancelCauseFunc
	cause  error
	closed atomic.Bool
	mu     sync.RWMutex // held for reading while a goroutine joins wg
	wg     sync.WaitGroup
}

// Init readies l; cause is the error its contexts end with at Close.
func (l *Life) Init(cause error) {
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	l.cause = cause
}

// Close marks the owner closed and cancels its background work; it
// reports whether this call did (the first one).
func (l *Life) Close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Swap(true) {
		return false
	}
	l.cancel(l.cause)
	return true
}

// Done reports whether the owner is closed.
func (l *Life) Done() bool { return l.closed.Load() }

// Go runs f on a goroutine that Close waits for, and reports
// whether it did: not once the owner is closed.
func (l *Life) Go(f func()) bool { return l.Run(false, f) }

// Run runs f as Go does, in the caller's goroutine if here is
// true: Close waits for it as for a goroutine of its own.
func (l *Life) Run(here bool, f func()) bool {
	l.mu.RLock()
	if l.closed.Load() {
		l.mu.RUnlock()
		return false
	}
	if !here {
		l.wg.Go(f)
		l.mu.RUnlock()
		return true
	}
	l.wg.Add(1)
	l.mu.RUnlock() // not held while f runs: Close takes it to mark the Cache closed
	defer l.wg.Done()
	f()
	return true
}

// Detach returns a context for background work on behalf of a caller: it
// keeps ctx's values (a trace) but not its cancellation, and ends at Close
// with the cause given to Init. stop releases it.
func (l *Life) Detach(ctx context.Context) (dctx context.Context, stop func()) {
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(l.ctx, func() { cancel(l.cause) })
	return dctx, func() { unhook(); cancel(nil) }
}

// Context is the context that ends at Close.
func (l *Life) Context() context.Context { return l.ctx }

// Wait waits for the work that Go and Run started.
func (l *Life) Wait() { l.wg.Wait() }
