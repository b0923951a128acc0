package hold

import (
	"context"
	"sync"
)

// A Lease is what Do needs of a lease: lock's and lock/memcache's both.
type Lease interface {
	Done() <-chan struct{}
	Err() error
	Unlock(ctx context.Context) error
}

// Do acquires a lease with lock, runs fn with it while holding it, and
// releases it:
// the block form shared by lock.Do and lock/memcache's Do (see there).
// fn's context is cancelled, with the lease's Err as the cause, if the
// lease is lost. Do releases the lease even if fn panics, and then panics
// again with the same value. It returns the acquire's error, else fn's,
// else the release's.
func Do[L Lease](ctx context.Context, lock func(context.Context) (L, error), fn func(ctx context.Context, l L) error) (err error) {
	l, err := lock(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-stop:
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
		cancel(nil)
		uerr := l.Unlock(ctx)
		if r := recover(); r != nil {
			panic(r)
		}
		if err == nil {
			err = uerr
		}
	}()
	return fn(fctx, l)
}
