package dogpile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// Invalidation by group, fleet-wide: InvalidateTag voids the values of a
// tag (see tags.go for how values join a tag's set), Clear every value of
// the Cache. Both work a batch at a time, so that Redis serves its other
// clients in between, and drop this process's copies and flights at once.

// tagBatch is how many values InvalidateTag voids in one pipeline: small
// enough that Redis, which runs a pipeline's scripts back to back, serves
// its other clients every millisecond or two.
const tagBatch = 256

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

// invalidateTag bumps t's epoch and moves its set aside, then voids the
// values of every set aside of t a batch at a time: its own, and any that
// another InvalidateTag of t is still working through, or left behind when
// it failed. Members are removed only once voided, so that however many
// InvalidateTag calls of t run at once, none returns while a value it
// should void is still served (two may void a value twice; that is
// harmless). On an error the values not yet voided stay aside, for the
// next InvalidateTag of t.
func (c *Cache[T]) invalidateTag(ctx context.Context, t string) error {
	set, epoch := c.tagKeys(t)
	registry := c.opts.prefix + tagRegistryName + redisutil.Tag(t)
	aside := set + ":" + redisutil.Token() // same hash tag: same slot
	asides, err := c.run(ctx, tagBumpScript, []string{epoch, set, registry, aside}, redisutil.Millis(epochLife)).StringSlice()
	if err != nil {
		return err
	}
	for _, a := range asides {
		if err := c.drain(ctx, registry, a); err != nil {
			return err
		}
	}
	return nil
}

// drain voids the values of aside, a set of t's value keys moved aside,
// until it is empty, and then drops it from t's registry of asides.
func (c *Cache[T]) drain(ctx context.Context, registry, aside string) error {
	for {
		vks, err := c.client.SRandMemberN(ctx, aside, tagBatch).Result()
		if err != nil {
			return err
		}
		if len(vks) == 0 { // nothing is added to a set once it is aside
			return c.client.SRem(ctx, registry, aside).Err()
		}
		if err := c.void(ctx, vks); err != nil {
			return err
		}
		if err := c.client.SRem(ctx, aside, anySlice(vks)...).Err(); err != nil {
			return err
		}
	}
}

// void makes the values vks a miss (or stale), in one pipeline, and drops
// this process's copies and flights of them.
func (c *Cache[T]) void(ctx context.Context, vks []string) error {
	calls := make([]scriptCall, len(vks))
	stale := redisutil.Millis(c.opts.stale)
	for i, vk := range vks {
		ks := keysFor(vk)
		calls[i] = scriptCall{voidScript, []string{ks.value, ks.lock, ks.channel}, []any{c.publish, stale}}
	}
	err := firstErr(c.runPipelined(ctx, calls))
	for _, vk := range vks {
		c.forget(vk)
	}
	return err
}

// tagBumpScript bumps a tag's epoch and moves its set aside, in one step,
// before InvalidateTag voids the values of the set: a value tagged after
// this step goes into a new set, and a compute that tagged before it finds
// the epoch moved. The set aside joins the tag's registry of sets aside,
// which it returns (the new one among them, if the tag had a set). KEYS:
// epoch, set, registry, the set's new name. ARGV: how long the epoch and
// the registry live at least (as long as its longest set aside), ms.
var tagBumpScript = redis.NewScript(`
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[4])
  redis.call('SADD', KEYS[3], KEYS[4])
  local life = math.max(tonumber(ARGV[1]), redis.call('PTTL', KEYS[4]))
  if redis.call('PTTL', KEYS[3]) < life then redis.call('PEXPIRE', KEYS[3], life) end
end
return redis.call('SMEMBERS', KEYS[3])
`)

// voidScript makes one value of an invalidated tag a miss, or with a stale
// window (ARGV[2] ms > 0) stale, so that it is refreshed in the background;
// takes the lock away from a compute in progress (its store is fenced off)
// and wakes the waiters. KEYS: value, lock, channel. ARGV: PUBLISH or
// SPUBLISH, stale window ms.
var voidScript = redis.NewScript(expiryLua + `
local stale = tonumber(ARGV[2])
if stale == 0 then
  redis.call('DEL', KEYS[1])
elseif redis.call('PTTL', KEYS[1]) > stale then
  shorten(KEYS[1], ARGV[2])
end
redis.call('DEL', KEYS[2])
redis.call(ARGV[1], KEYS[3], '` + wake.Deleted + `')
return 1
`)
