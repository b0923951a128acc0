package lock

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Do locks the mutex called name, runs fn while holding it, and releases
// it: the block form of [Mutex.Lock]. The lease extends itself while fn runs
// ([WithAutoExtend] is implied), and fn's context is cancelled, with cause
// [ErrLost], if the lease is lost. Do releases the lock even if fn panics,
// and then panics again with the same value.
//
// Do panics if fn is nil (a programmer error).
//
// Do returns the error of the acquire, else fn's error, else the release's
// error: [ErrNotHeld] if the lease was lost while fn ran, in which case fn's
// work may have overlapped with another holder.
func Do(ctx context.Context, client redis.UniversalClient, name string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		panic("lock: Do with a nil function (a programmer error)")
	}
	opts = append([]Option{WithAutoExtend()}, opts...)
	l, err := NewMutex(client, name, opts...).Lock(ctx)
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
	return fn(fctx)
}
