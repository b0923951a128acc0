package dogpile

import (
	"context"

	"github.com/dogpile-go/dogpile/internal/near"
)

// WithStaleIfDown lets Fetch answer from the near tier while Redis is
// unreachable, instead of failing with [ErrUnavailable]: when the near
// tier's tracking connection fails, the tier keeps its copies rather than
// emptying itself, and while the client's circuit is open (see
// ErrUnavailable) a Fetch of a key the tier holds gets that copy, up to its
// stale point: the value's TTL plus the stale window, as Redis would have
// served it. Such answers are hits with Stale set, counted in
// [Stats].StaleIfDown. The copies are never served while Redis answers:
// not as fresh, since tracking no longer covers them, and not as stale
// once the circuit has closed; they are dropped when tracking comes back.
// With [WithComputeWhenDown], a copy is served before compute is called
// without the cache. FetchMany and Get are unchanged.
//
// What a partition may show: a process cut off from Redis hears of no
// write, so it may serve a value that another process has replaced (or
// deleted) meanwhile, up to that value's stale point. Use it only where a
// value that old is acceptable while Redis is down.
//
// Without both [WithNearCache] and [WithStale], WithStaleIfDown changes
// nothing: there is no copy to keep, or no window to serve it in.
func WithStaleIfDown() Option {
	return optionFunc(func(o *options) { o.staleIfDown = true })
}

// downHit answers a Fetch of key with the near tier's kept copy of vk, if
// Redis is unreachable and the tier has one (see nearTier.downHit).
func (c *core[T]) downHit(ctx context.Context, key, vk string) (v T, err error, ok bool) {
	v, tomb, ok := c.near.downHit(vk)
	if !ok {
		return v, nil, false
	}
	c.stats.staleIfDown.Add(1)
	c.emit(ctx, Event{Kind: EventHit, Key: key, Near: true, Stale: true, NotFound: tomb})
	if tomb {
		return v, notFound(key), true
	}
	return v, nil, true
}

// downHit returns the copy of vk the tier kept when tracking was lost (see
// near.Handlers.Keep), if the client's circuit is open and has not closed
// since then, and the copy is short of its expiry in Redis. Its reader
// died with the session, so its Owner is not asked: what covers the copy
// is the option's bargain, not tracking.
func (n *nearTier[T]) downHit(vk string) (v T, notFound, ok bool) {
	if n == nil || !n.x.Kept() || !n.b.Open() || n.b.Closings() != n.keptAt.Load() {
		return v, false, false
	}
	e, ok := n.store.GetIfPresent(vk)
	if !ok || near.Now() >= e.down {
		return v, false, false
	}
	return e.v, e.notFound, true
}
