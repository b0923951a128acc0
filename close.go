package dogpile

import (
	"context"
	"sync"
	"sync/atomic"
)

// life is what Close ends: the background goroutines of a Cache, and the
// contexts they run with.
type life struct {
	ctx    context.Context // ends at Close, with cause ErrClosed
	cancel context.CancelCauseFunc
	closed atomic.Bool
	mu     sync.RWMutex // held for reading while a goroutine joins wg
	wg     sync.WaitGroup
}

func (l *life) init() { l.ctx, l.cancel = context.WithCancelCause(context.Background()) }

// close marks the Cache closed and cancels its background work; it
// reports whether this call did (the first one).
func (l *life) close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Swap(true) {
		return false
	}
	l.cancel(ErrClosed)
	return true
}

// done reports whether the Cache is closed.
func (l *life) done() bool { return l.closed.Load() }

// goBackground runs f on a goroutine that Close waits for, and reports
// whether it did: not once the Cache is closed.
func (l *life) goBackground(f func()) bool { return l.run(false, f) }

// run runs f as goBackground does, in the caller's goroutine if here is
// true: Close waits for it as for a goroutine of its own.
func (l *life) run(here bool, f func()) bool {
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

// detach returns a context for background work on behalf of a caller: it
// keeps ctx's values (a trace) but not its cancellation, and ends at Close
// with cause ErrClosed. stop releases it.
func (l *life) detach(ctx context.Context) (dctx context.Context, stop func()) {
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(l.ctx, func() { cancel(ErrClosed) })
	return dctx, func() { unhook(); cancel(nil) }
}
