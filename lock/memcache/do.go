package memcache

import (
	"context"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/dogpile-go/dogpile/internal/hold"
)

// Do locks the mutex called name, runs fn with the lease while holding it,
// and releases it: the block form of [Mutex.Lock], as lock.Do. The lease extends itself
// while fn runs ([WithAutoExtend] is implied), and fn's context is
// cancelled, with cause [ErrLost], if the lease is lost. Do releases the
// lock even if fn panics, and then panics again with the same value.
//
// Do panics if fn is nil (a programmer error).
//
// Do returns the error of the acquire, else fn's error, else the release's
// error: [ErrNotHeld] if the lease was lost while fn ran, in which case
// fn's work may have overlapped with another holder.
func Do(ctx context.Context, client *gomemcache.Client, name string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	if fn == nil {
		panic("lock/memcache: Do with a nil function (a programmer error)")
	}
	opts = append([]Option{WithAutoExtend()}, opts...)
	return hold.Do(ctx, NewMutex(client, name, opts...).Lock, fn)
}
