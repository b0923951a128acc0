package dogpile

import (
	"context"
	"sync"
	"time"
)

// SetTTL, called by a compute function with the context it was given, sets
// how long the value it returns is cached, in place of the ttl passed to
// Fetch or Refresh: for example the max-age of an upstream's Cache-Control
// header. A ttl of zero or less means that the value is not stored at all:
// it is returned to the callers waiting for this compute, in this process
// and in the others, and the next Fetch computes again (max-age=0, or a
// result known to be partial). The stale window of [WithStale] is added as
// for any value. SetTTL does nothing on a context that did not come from
// this package's compute call; the last call wins.
//
// A compute that fails with [ErrNotFound] is cached for the [WithNegativeTTL]
// duration instead, whatever SetTTL said.
func SetTTL(ctx context.Context, ttl time.Duration) {
	if ro, ok := ctx.Value(resultKey{}).(*resultOpts); ok {
		ro.set(ttl)
	}
}

type resultKey struct{}

// resultOpts holds what compute said about its result. compute may call
// SetTTL from any goroutine, hence the mutex.
type resultOpts struct {
	mu  sync.Mutex
	ttl time.Duration
	ok  bool
}

func (r *resultOpts) set(ttl time.Duration) {
	r.mu.Lock()
	r.ttl, r.ok = ttl, true
	r.mu.Unlock()
}

func (r *resultOpts) get() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ttl, r.ok
}
