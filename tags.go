package dogpile

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// Tags: values computed with Tag (see job.go) or stored by SetTagged
// join a set per tag, and InvalidateTag voids every value of a tag's set.

// epochLife is how long a tag's epoch lives after its last InvalidateTag:
// far longer than any compute runs between Tag and its store.
const epochLife = 24 * time.Hour

// What follows a Cache's prefix in the names of a tag's keys (see below,
// "Tags"), before the tag's hash tag.
const (
	tagSetName      = "tag:"  // its set of value keys, and the sets moved aside
	tagEpochName    = "tagv:" // its epoch
	tagRegistryName = "tagx:" // its registry of sets moved aside
)

// tagKeys are the Redis names of tag t: its set of value keys, and its
// epoch. Both share t's hash slot.
func (c *core[T]) tagKeys(t string) (set, epoch string) {
	tag := redisutil.Tag(t)
	return c.opts.prefix + tagSetName + tag, c.opts.prefix + tagEpochName + tag
}

// tagCalls are the calls that add value key vk, stored for ttl, to the
// sets of tags.
func (c *core[T]) tagCalls(vk string, ttl time.Duration, tags []string) []scriptCall {
	calls := make([]scriptCall, len(tags))
	for i, t := range tags {
		set, epoch := c.tagKeys(t)
		calls[i] = scriptCall{Script: script.TagAdd, Keys: []string{set, epoch}, Args: []any{vk, redisutil.Millis(ttl)}}
	}
	return calls
}

// readEpochs reads the epochs of tags ("" for none), in one round trip
// (one per node). It is what Tag calls.
func (c *core[T]) readEpochs(ctx context.Context, tags []string) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(tags))
	_ = redisutil.Pipelined(ctx, c.client, func(p redis.Pipeliner) {
		for i, t := range tags {
			_, epoch := c.tagKeys(t)
			cmds[i] = p.Get(ctx, epoch)
		}
	})
	out := make([]string, len(tags))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		switch {
		case err == redis.Nil:
		case err != nil:
			return nil, err
		default:
			out[i] = v
		}
	}
	return out, nil
}

// storeCallFor is the script call that stores b for ks under token, as
// store does, for a compute that said ro: a plain store; on one server,
// one that checks and adds the tags in the same step; with split, a plain
// store whose tags tagFirst must add before it; or, when the cache cannot
// vouch for the tags (Tag could not read them), one that keeps nothing but
// hands the value to the waiters.
func (c *core[T]) storeCallFor(ks keys, token string, b []byte, ttl time.Duration, ro *resultOpts) (sc scriptCall, split bool) {
	tags, seen, vouch := ro.tagged()
	switch {
	case len(tags) == 0 || ttl == 0:
		return c.storeCall(ks, token, b, ttl), false
	case !vouch:
		return c.storeCall(ks, token, b, 0), false
	case !c.oneNode():
		return c.storeCall(ks, token, b, ttl), true
	}
	sc = c.storeCall(ks, token, b, ttl)
	sc.Script = script.StoreTagged
	for i, t := range tags {
		set, epoch := c.tagKeys(t)
		sc.Keys = append(sc.Keys, set, epoch)
		sc.Args = append(sc.Args, seen[i])
	}
	return sc, false
}

// tagFirst adds the value keys vks, to be stored for ttls, to the sets of
// the tags compute gave them (ro), where a tag's keys live on other nodes
// than a value's (a Cluster, a Ring), before their stores; it reports which
// an InvalidateTag has overtaken: one of its tags' epochs is no longer the
// one compute saw (or could not be read). Those are not stored. A value in
// its tags' sets before its store is voided by any InvalidateTag that
// moves a set aside after that (its store is then refused, or the value
// deleted, before the InvalidateTag returns), and one whose epoch moved
// before is never stored: no value tagged before an InvalidateTag is
// served after it returned, and no waiter is handed one meanwhile.
func (c *core[T]) tagFirst(ctx context.Context, ro *resultOpts, vks []string, ttls []time.Duration) (overtaken []bool) {
	tags, seen, _ := ro.tagged()
	var calls []scriptCall
	for i, vk := range vks {
		calls = append(calls, c.tagCalls(vk, ttls[i], tags)...)
	}
	cmds := redisutil.RunScripts(ctx, c.client, calls)
	overtaken = make([]bool, len(vks))
	for i := range vks {
		for k := range tags {
			if e, err := cmds[i*len(tags)+k].Text(); err != nil || e != seen[k] {
				overtaken[i] = true
				break
			}
		}
	}
	return overtaken
}

// Tags (see Tag, InvalidateTag). A tag t of a Cache with prefix p has a set
// "p tag:{t}" of the value keys stored with it, which expires no sooner
// than the last of them, and an epoch "p tagv:{t}", a counter that each
// InvalidateTag of t bumps (it expires a day after the last one); while an
// InvalidateTag works, the set is moved aside to "p tag:{t}:<token>",
// listed in the registry "p tagx:{t}" until it is voided (see
// invalidateTag). All share the tag's hash slot; a value's keys share
// another.

// storeCall is the script call of store.
func (c *core[T]) storeCall(ks keys, token string, b []byte, ttl time.Duration) scriptCall {
	return scriptCall{Script: script.Store, Keys: []string{ks.value, ks.lock, ks.channel},
		Args: []any{token, b, redisutil.Millis(ttl), c.publish, maxWakeValue}}
}

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
	asides, err := script.TagBump.Run(ctx, c.client, []string{epoch, set, registry, aside}, redisutil.Millis(epochLife)).StringSlice()
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
		calls[i] = scriptCall{Script: script.Void, Keys: []string{ks.value, ks.lock, ks.channel}, Args: []any{c.publish, stale}}
	}
	err := firstErr(redisutil.RunScripts(ctx, c.client, calls))
	for _, vk := range vks {
		c.forget(vk)
	}
	return err
}

// set is Set, and SetTagged with tags.
func (c *core[T]) set(ctx context.Context, key string, v T, ttl time.Duration, tags []string) error {
	ttl, err := c.checkTTL(key, ttl)
	if err != nil {
		return err
	}
	ks := c.keys(key)
	b, err := c.encode(v)
	if err != nil {
		return fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	stored := c.jittered(ttl) + c.opts.stale
	calls := append(make([]scriptCall, 0, 1+len(tags)), scriptCall{Script: script.Set, Keys: []string{ks.value, ks.lock, ks.channel},
		Args: []any{b, redisutil.Millis(stored), c.publish}})
	calls = append(calls, c.tagCalls(ks.value, stored, tags)...)
	err = c.guard(ctx, func() error {
		if len(calls) == 1 || !c.oneNode() {
			// Where a tag's set and the value live on different nodes,
			// the value first: added to a set before it is stored, it
			// could be voided by an InvalidateTag in between and then
			// stored, out of every set, for good.
			err := calls[0].Run(ctx, c.client).Err()
			if err == nil && len(calls) > 1 {
				err = firstErr(redisutil.RunScripts(ctx, c.client, calls[1:]))
			}
			if err != nil && len(calls) > 1 {
				// Stored (or its reply lost) but maybe in no tag's set,
				// where InvalidateTag would never find it: undone, unless
				// a later write replaced it.
				redisutil.Rollback(ctx, func(ctx context.Context) {
					_ = script.UndoSet.Run(ctx, c.client, []string{ks.value}, b).Err()
				})
			}
			return err
		}
		return firstErr(redisutil.RunScripts(ctx, c.client, calls))
	})
	c.forget(ks.value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "set", key, err)
	}
	return nil
}
