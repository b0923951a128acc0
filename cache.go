// Package dogpile is a typed read-through cache on Redis that keeps a missing
// or expired key from stampeding the backing store: concurrent misses for a
// key, in one process or across every process sharing the Redis server or
// cluster, call compute once, and everyone else waits for the stored value.
//
//	users := dogpile.New[User](rdb)
//	u, err := users.Fetch(ctx, "user:42", time.Minute, func(ctx context.Context) (User, error) {
//		return db.LoadUser(ctx, 42) // called once in the fleet per expiry
//	})
//
// # Guarantees
//
//   - One compute per expiry, fleet-wide: of all processes that miss a key,
//     exactly one computes; the others wait for its value (see [Cache.Fetch]).
//   - Read your writes: a call that starts after [Cache.Set], [Cache.Delete]
//     or [Cache.Refresh] of its key returned in this process (or, with the
//     near tier, after the write's invalidation arrived) never returns the
//     value that write replaced.
//   - Fenced stores: a process that lost its compute lock (to Set, Delete, a
//     takeover or a failover) never overwrites a newer value, and its own
//     callers get the newer value too.
//   - Waiters are woken by a push from Redis the moment the value is stored,
//     and each wait is bounded by the holder's lease ([WithLease]): a lost
//     message or a process that died mid-compute costs at most one lease.
//   - A failed compute stores nothing and releases the lock at once: callers
//     in this process get its error, waiters elsewhere [ErrComputeFailed].
//   - Bytes that do not decode, or a key of another type, are a miss:
//     recomputed and overwritten.
//   - [Cache.FetchMany] gives each key the guarantees of Fetch, calling compute
//     once with exactly the keys this process won.
//   - With [WithStale], a value past its TTL is served at once while one
//     process in the fleet refreshes it in the background; a failing refresh
//     keeps it served, asking the backend at most once per [WithRefreshRetry].
//   - With [WithEarlyRefresh], a hot key is refreshed by one process shortly
//     before it expires, so its callers never see it expire.
//   - With [WithNearCache], a value kept in process memory never hides a
//     write that returned more than 100 ms ago, nor outlives its TTL in Redis.
//   - A failover of a key's master costs at most one more compute of a key
//     being computed, and no store leaves a value older than one already served.
//
// # Errors
//
// Match errors with errors.Is: [ErrNotFound] (compute found nothing; cached as a
// tombstone with [WithNegativeTTL]), [ErrComputeFailed], [ErrUnavailable] (Redis
// found down: calls fail at once, and compute is not called unless
// [WithComputeWhenDown]), [ErrInvalid], [ErrMiss] (from [Cache.Get]) and
// [ErrClosed]. Other Redis errors are returned wrapped. [WithObserver],
// [Cache.Stats] and [WithLogger] report what a Cache does.
//
// How it works: docs/design.md in the repository, with the Redis keys, the
// entry format, failover and the client options it recommends.
package dogpile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
	"github.com/dogpile-go/dogpile/internal/script"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A Cache is a typed read-through cache of values of type T in Redis, shared
// by every process that uses the same Redis, key prefix and codec.
//
// A Cache is safe for concurrent use. The zero value is not usable; create
// one with [New].
type Cache[T any] struct {
	*core[T]
}

// New returns a Cache that keeps values of type T in client's Redis: a single
// server, a Cluster or any other [redis.UniversalClient]. It does no I/O. It
// panics if client is nil (a nil *redis.Client too), or if an option is nil.
func New[T any](client redis.UniversalClient, opts ...Option) *Cache[T] {
	redisutil.MustClient("dogpile", client)
	c := &core[T]{
		client:   client,
		opts:     buildOptions(opts),
		publish:  wake.PublishCommand(client),
		attempts: newTurns(client),
		breaker:  breaker.For(client),
		gets:     roundtrip.GetsOf(client),
	}
	c.space = keyspace.Space{Client: client, Prefix: c.opts.prefix, Publish: c.publish, Stale: c.opts.stale, Forget: c.forget}
	c.life.Init(ErrClosed)
	if c.opts.logger != nil {
		c.breaker.AddLogger(c.opts.logger) // it logs the client's outages
	}
	if c.opts.stale > 0 || c.opts.beta > 0 || c.opts.nearEntries > 0 {
		c.fresh = &entry.Expiry{}
		c.looks.off = true // their hits need the TTL or a tracked read (see looks)
	}
	if c.opts.nearEntries > 0 {
		c.near = c.newNear()
	}
	c.readHit = c.pickReader()
	c.checks = c.newChecks()
	return &Cache[T]{c}
}

// Get returns the value cached under key, stale or not; it never computes or
// refreshes. It returns an error matching [ErrMiss] if there is none or it does
// not decode, [ErrNotFound] for a not-found tombstone ([WithNegativeTTL]), and
// [ErrInvalid] for an empty key; other errors come from Redis, wrapped.
func (c *Cache[T]) Get(ctx context.Context, key string) (T, error) {
	var zero T
	if err := c.checkKey(key); err != nil {
		return zero, err
	}
	var b []byte
	err := c.guard(ctx, func() (err error) {
		b, err = c.get(ctx, c.client, c.valueKey(key))
		return err
	})
	switch {
	case err == redis.Nil:
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		return zero, ErrMiss
	case err != nil:
		return zero, redisutil.Failed(ctx, "dogpile", "get", key, err)
	}
	v, m, err := c.decodeEntry(b)
	if err != nil {
		c.decodeError(ctx, key, err)
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		return zero, fmt.Errorf("%w: %q: %v", ErrMiss, key, err)
	}
	c.emitRead(ctx, Event{Kind: EventHit, Key: key, NotFound: m.NotFound}, b, false, true)
	if m.NotFound {
		return zero, errNotFound(key)
	}
	return v, nil
}

// Set stores v under key for ttl (plus the stale window of [WithStale]). A
// compute of key in progress anywhere loses its lock and does not overwrite v;
// its callers, and the processes waiting for it, get v. Once Set returns, no
// call of this Cache that starts later returns the value v replaced. An empty
// key or a ttl below a millisecond returns an error matching [ErrInvalid].
func (c *Cache[T]) Set(ctx context.Context, key string, v T, ttl time.Duration) error {
	return c.set(ctx, key, v, ttl, nil)
}

// Delete removes the value cached under key, if any. A compute of key in
// progress anywhere loses its lock, and the processes waiting for it start a
// new one. Once Delete returns, no call of this Cache that starts later returns
// the removed value. An empty key returns an error matching [ErrInvalid].
func (c *Cache[T]) Delete(ctx context.Context, key string) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	ks := c.keys(key)
	err := c.guard(ctx, func() error {
		return script.Delete.Run(ctx, c.client, []string{ks.Value, ks.Lock, ks.Channel}, c.publish).Err()
	})
	c.forget(ks.Value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "delete", key, err)
	}
	return nil
}

// Expire makes the value cached under key stale now, in every process (see
// [WithStale]); without WithStale it is [Cache.Delete]. A compute of key in
// progress loses its lock. Once Expire returns, no call of this Cache that
// starts later takes the old value for fresh. An absent key is no error; an
// empty one returns an error matching [ErrInvalid].
func (c *Cache[T]) Expire(ctx context.Context, key string) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	if err := c.guard(ctx, func() error { return c.space.Void(ctx, []string{c.valueKey(key)}) }); err != nil {
		return redisutil.Failed(ctx, "dogpile", "expire", key, err)
	}
	return nil
}

// Close ends the Cache's flights, background refreshes, near-tier tracking and
// checks (a verify call in progress included), and waits for them: no goroutine
// of the Cache outlives it. Their computes' context ends with cause [ErrClosed]
// (one that gives up is no compute error);
// their callers, and every call after Close, get ErrClosed. It does not close
// the client. Close may be called more than once.
func (c *Cache[T]) Close() error {
	if !c.life.Close() {
		return nil
	}
	c.near.Stop()
	c.life.Wait()
	return nil
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache[T]) Stats() Stats {
	s := &c.stats
	st := Stats{
		Hits: s.hits.Load(), Misses: s.misses.Load(), Computes: s.computes.Load(),
		Waits: s.waits.Load(), PushWakeups: s.push.Load(), PollWakeups: s.poll.Load(),
		Takeovers: s.takeovers.Load(), DecodeErrors: s.decodeErrors.Load(),
		ComputeErrors: s.computeErrors.Load(), Shared: s.shared.Load(),
		RemoteErrors: s.remoteErrors.Load(), Stale: s.stale.Load(), NotFound: s.notFound.Load(), Refreshes: s.refreshes.Load(),
		Unavailable: s.unavailable.Load(), NearHits: s.nearHits.Load(),
		StaleIfDown: s.staleIfDown.Load(), NearOff: s.nearOff.Load(),
	}
	st.NearInvalidations, st.NearFlushes, st.NearLate = c.near.Counts()
	c.checks.stats(&st)
	return st
}

// SetTagged is [Cache.Set] of a value with tags (see [Tag]): a later
// [Cache.InvalidateTag] of any of them drops it. Empty tags are ignored.
func (c *Cache[T]) SetTagged(ctx context.Context, key string, v T, ttl time.Duration, tags ...string) error {
	return c.set(ctx, key, v, ttl, slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == "" }))
}

// InvalidateTag makes every value tagged with any of tags ([Tag],
// [Cache.SetTagged]) a miss in every process, near tiers included, or with
// [WithStale] stale (a not-found tombstone goes); a compute of one in progress
// loses its lock. Once it returns, no call that starts later, anywhere, returns
// a value tagged before it began, even one stored afterwards. A key stays in a
// tag's set until the set expires, so a later value of it stored untagged may
// be voided too. It returns the first error, leaving the rest to the next
// InvalidateTag; an empty tag returns an error matching [ErrInvalid].
func (c *Cache[T]) InvalidateTag(ctx context.Context, tags ...string) error {
	if c.life.Done() {
		return ErrClosed
	}
	if slices.Contains(tags, "") {
		return fmt.Errorf("%w: empty tag", ErrInvalid)
	}
	start := time.Now()
	// After the voids, as Set forgets after its write: a compute that
	// tagged before them will not keep its value (see forgetTagged).
	defer c.flights.ForgetTagged(tags)
	for _, t := range tags {
		if err := c.space.Invalidate(ctx, t); err != nil {
			return redisutil.Failed(ctx, "dogpile", "invalidate tag", t, err)
		}
	}
	// The values another process's InvalidateTag of these tags voided
	// first are gone from the tags' sets, and from this tier only once
	// their invalidations arrive: wait for them.
	c.near.Sync(ctx)
	c.emit(ctx, Event{Kind: EventInvalidateTag, Tags: tags, Took: time.Since(start)})
	return nil
}

// Clear removes every key the Cache wrote, on every node (values, locks, tags),
// and no other key, even under its prefix. A compute in progress anywhere loses
// its lock, as after [Cache.Delete], and near tiers drop their copies. A value
// stored while Clear runs may survive it. Clear returns the first error a node
// reported, with that node's keys perhaps partly removed.
func (c *Cache[T]) Clear(ctx context.Context) error {
	if c.life.Done() {
		return ErrClosed
	}
	err := c.space.Clear(ctx)
	// After the deletes, as Set does after its write (see forget).
	c.flights.ForgetAll()
	c.near.ForgetAll()
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "clear", c.opts.prefix, err)
	}
	return nil
}

// HotKeys returns the n keys of c that this process read most over the last
// one to two minutes (the current window and the whole minute before it),
// most reads first (ties in key order), fewer if fewer were read. It returns
// nil if n ≤ 0; n above 256 is taken as 256. Keys come from data: log them,
// and put them in a metric's attributes only bounded, as dogpileotel's
// Observer.Watch does. [DebugHandler] shows them; [HideKeys] hides them.
//
// Memory is bounded whatever the key space: about 62 KB per Cache, and the
// strings of at most 512 keys. Misses, Computes and Waits are exact while a
// key is reported; Reads is an estimate, within N/256 of the key's reads (N:
// all reads over the span), plus about 8√h for a key of h hits (hits are
// sampled, one in 64). A hit pays a multiplication and a test for this.
// docs/design.md, "Hot keys", tells how.
func (c *Cache[T]) HotKeys(n int) []HotKey {
	top := c.hot.Top(n)
	if top == nil {
		return nil
	}
	hot := make([]HotKey, len(top))
	for i, e := range top {
		hot[i] = HotKey{Key: e.Key, Reads: e.Reads, Misses: e.Misses, Computes: e.Computes, Waits: e.Waits}
	}
	return hot
}
