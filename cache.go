package dogpile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/redisutil"
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

// New returns a Cache that keeps values of type T in client's Redis. It
// does no I/O. New panics if client is nil (a nil *redis.Client too), or
// if an option is nil.
//
// client may be a *redis.Client, a *redis.ClusterClient or any other
// [redis.UniversalClient]. All the Redis keys of one cache key share a hash
// tag, so each Fetch touches a single cluster slot.
func New[T any](client redis.UniversalClient, opts ...Option) *Cache[T] {
	redisutil.MustClient("dogpile", client)
	c := &core[T]{
		client:   client,
		opts:     buildOptions(opts),
		publish:  wake.PublishCommand(client),
		attempts: newTurns(client),
		breaker:  breaker.For(client),
		gets:     getBatcherFor(client),
	}
	c.flights.m = map[flightID]*call{}
	c.life.init()
	if c.opts.logger != nil {
		c.breaker.AddLogger(c.opts.logger) // it logs the client's outages
	}
	if c.opts.stale > 0 || c.opts.beta > 0 || c.opts.nearEntries > 0 {
		c.fresh = &freshRead{}
		c.looks.off = true // their hits need the TTL or a tracked read (see look.go)
	}
	if c.opts.nearEntries > 0 {
		c.near = newNear(c)
	}
	return &Cache[T]{c}
}

// Get returns the value cached under key. It returns an error matching
// [ErrMiss] if there is none, or if what is stored does not decode, and one
// matching [ErrNotFound] if the key holds a not-found tombstone (see
// [WithNegativeTTL]); an empty key, one matching [ErrInvalid]; other errors
// come from Redis, wrapped. With [WithStale], Get returns a stale value as it
// is, and refreshes nothing.
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
	c.emit(ctx, Event{Kind: EventHit, Key: key, NotFound: m.notFound})
	if m.notFound {
		return zero, notFound(key)
	}
	return v, nil
}

// Set stores v under key for ttl. A compute of key running anywhere at that
// moment loses its lock: its result is not stored over v (its own callers
// get v too), and processes waiting for it read v at once. Once Set
// returns, no call of this Cache that starts later returns the value v
// replaced: it does not join a Fetch, FetchMany or Refresh of key that read
// Redis or began its compute before the Set. With [WithStale], v stays in
// Redis for ttl plus the stale window, like a computed value. An empty key
// or a ttl below a millisecond returns an error matching [ErrInvalid].
func (c *Cache[T]) Set(ctx context.Context, key string, v T, ttl time.Duration) error {
	return c.set(ctx, key, v, ttl, nil)
}

// Delete removes the value cached under key, if any. Like [Cache.Set], it
// also takes the compute lock away from a compute of key running at that
// moment, so a value computed from data older than the Delete is not
// stored; processes waiting for that compute start a new one. As after
// Set, no call of this Cache that starts after Delete returns the value it
// removed. An empty key returns an error matching [ErrInvalid].
func (c *Cache[T]) Delete(ctx context.Context, key string) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	ks := c.keys(key)
	err := c.guard(ctx, func() error {
		return c.run(ctx, deleteScript, []string{ks.value, ks.lock, ks.channel}, c.publish).Err()
	})
	c.forget(ks.value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "delete", key, err)
	}
	return nil
}

// Close stops the Cache's background work and waits for it to end: the
// near tier's tracking (see [WithNearCache]), and the flights and
// background refreshes in progress, whose compute's context is cancelled
// with cause ErrClosed (a compute that gives up releases its lock, so
// another process takes over at once, and is no compute error in [Stats]
// or to the observer; one that ignores its context is waited for).
// Callers waiting for them get ErrClosed, and every call after Close
// returns ErrClosed. So no goroutine of the Cache outlives Close.
//
// Close does not close the client, which the program owns. What is kept
// per client, for every Cache and lock on it, outlives Close: the circuit
// breaker, and the wake-up connection, which closes 250 ms after its last
// waiter leaves; so does a rollback in flight (an undo of a request whose
// reply was lost), bounded by 3 s, and a sample of the servers' clock in
// flight (a TIME per server, see WithStale), until its reply. Close may be
// called more than once.
func (c *Cache[T]) Close() error {
	if !c.life.close() {
		return nil
	}
	if c.near != nil {
		c.near.t.Stop()
	}
	c.life.wg.Wait()
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
		Unavailable: s.unavailable.Load(), NearHits: s.nearHits.Load(), NearLate: s.nearLate.Load(), NearOff: s.nearOff.Load(),
	}
	if c.near != nil {
		st.NearInvalidations, st.NearFlushes = c.near.x.Invalidations(), c.near.x.Flushes()
	}
	return st
}

// SetTagged is [Cache.Set] of a value with tags (see [Tag]): a later
// [Cache.InvalidateTag] of any of them drops it. Empty tags are ignored.
func (c *Cache[T]) SetTagged(ctx context.Context, key string, v T, ttl time.Duration, tags ...string) error {
	return c.set(ctx, key, v, ttl, slices.DeleteFunc(slices.Clone(tags), func(t string) bool { return t == "" }))
}

// InvalidateTag makes every value tagged with any of tags (by [Tag] in a
// compute, or [Cache.SetTagged]) a miss in every process, near tiers
// included (as Redis reports each change, and in this process at once);
// with [WithStale] it makes them stale instead: served while one process
// refreshes each in the background. A compute of such a value in progress
// loses its lock, as after [Cache.Delete].
//
// With a near tier, InvalidateTag then waits until the tier has applied
// the invalidations of values that another process's InvalidateTag of the
// tags voided first (this call finds them gone from the tags' sets): until
// its tracking connections answer a ping sent now (a reader busy with a
// read, after that read): about a round trip. If that takes 100 ms, or
// ctx ends, this process's tier is emptied instead.
//
// A compute that called Tag with one of tags before InvalidateTag began
// does not leave its value served after InvalidateTag returned, whenever
// it stores it: its store is refused, on a Cluster or a Ring too, where a
// tag's keys and a value's live on different nodes, and its flight
// computes again, so the value reaches no caller in any process (a caller
// may have joined the flight after InvalidateTag returned); and no call of
// this process that starts after InvalidateTag returned joins such a
// compute. A key stays in a tag's set
// until the set expires: a later value stored under it without the tag
// may be voided by an InvalidateTag of the tag too.
//
// InvalidateTag works through a tag's values a few hundred at a time, so
// Redis is never blocked for long; it returns once they are all voided,
// those of another InvalidateTag of the tag still at work included. It
// returns the first error: the values not yet reached are kept for the
// next InvalidateTag of the tag. An empty tag returns an error matching
// [ErrInvalid].
func (c *Cache[T]) InvalidateTag(ctx context.Context, tags ...string) error {
	if c.life.done() {
		return ErrClosed
	}
	if slices.Contains(tags, "") {
		return fmt.Errorf("%w: empty tag", ErrInvalid)
	}
	start := time.Now()
	// After the voids, as Set forgets after its write: a compute that
	// tagged before them will not keep its value (see forgetTagged).
	defer c.flights.forgetTagged(tags)
	for _, t := range tags {
		if err := c.invalidateTag(ctx, t); err != nil {
			return redisutil.Failed(ctx, "dogpile", "invalidate tag", t, err)
		}
	}
	// The values another process's InvalidateTag of these tags voided
	// first are gone from the tags' sets, and from this tier only once
	// their invalidations arrive: wait for them.
	c.nearSync(ctx)
	c.emit(ctx, Event{Kind: EventInvalidateTag, Tags: tags, Took: time.Since(start)})
	return nil
}

// Clear removes every key the Cache wrote, on every master of a Cluster or
// shard of a Ring: each value with its compute lock, its records of failed
// computes and its retry mark (see the package doc, "Redis keys"), and the
// tags' bookkeeping (see [Tag]): each tag's set of values and its epoch,
// and the sets an InvalidateTag still works through, whose values it voids
// first. It tells these keys by the shape of their names, and leaves alone
// every other key, under its prefix or not: the lock package's, those of
// Caches with other prefixes, any other program's, and the key that a
// Cache with freshness options writes for a few milliseconds to check the
// server's clock, which removes itself.
//
// A compute running anywhere at that moment loses its lock, so its value
// is not stored (as after [Cache.Delete]); near tiers in every process drop
// their copies as Redis reports each deletion, and this process's at once.
// Clear walks the keyspace with SCAN, twice (three times if tags were
// used), and removes keys with UNLINK, a thousand at a time, so Redis is
// never blocked for long. A value stored while Clear runs may survive it
// (in its tags' sets); an InvalidateTag that also runs meanwhile may then
// leave it served, if its compute took the lock after Clear began. Clear
// returns the first error a node reported (the keys of that node may be
// partly removed).
func (c *Cache[T]) Clear(ctx context.Context) error {
	if c.life.done() {
		return ErrClosed
	}
	err := c.clear(ctx)
	// After the deletes, as Set does after its write (see forget).
	c.flights.forgetAll()
	if c.near != nil {
		c.near.x.DropAll()
	}
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "clear", c.opts.prefix, err)
	}
	return nil
}
