package dogpile

import (
	"context"

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

// invalidateTag bumps t's epoch and moves its set aside, then voids the
// values of every set aside of t a batch at a time: its own, and any that
// another InvalidateTag of t is still working through, or left behind when
// it failed. Members are removed only once voided, so that however many
// InvalidateTag calls of t run at once, none returns while a value it
// should void is still served (two may void a value twice; that is
// harmless). On an error the values not yet voided stay aside, for the
// next InvalidateTag of t.
func (c *core[T]) invalidateTag(ctx context.Context, t string) error {
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
func (c *core[T]) drain(ctx context.Context, registry, aside string) error {
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
func (c *core[T]) void(ctx context.Context, vks []string) error {
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
