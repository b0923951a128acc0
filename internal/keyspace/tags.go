package keyspace

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// Tags: values computed with Tag or stored by SetTagged join a set per
// tag, and InvalidateTag voids every value of a tag's set.

// EpochLife is how long a tag's epoch lives after its last InvalidateTag:
// far longer than any compute runs between Tag and its store.
const EpochLife = 24 * time.Hour

// TagCalls are the calls that add value key vk, stored for ttl, to the
// sets of tags.
func (s *Space) TagCalls(vk string, ttl time.Duration, tags []string) []redisutil.Call {
	calls := make([]redisutil.Call, len(tags))
	for i, t := range tags {
		set, epoch := s.TagKeys(t)
		calls[i] = redisutil.Call{Script: script.TagAdd, Keys: []string{set, epoch}, Args: []any{vk, redisutil.Millis(ttl)}}
	}
	return calls
}

// ReadEpochs reads the epochs of tags ("" for none), in one round trip
// (one per node). It is what Tag calls.
func (s *Space) ReadEpochs(ctx context.Context, tags []string) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(tags))
	_ = redisutil.Pipelined(ctx, s.Client, func(p redis.Pipeliner) {
		for i, t := range tags {
			_, epoch := s.TagKeys(t)
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

// StoreTagged turns sc, a store's call (script.Store), into one that
// also checks that the epochs of tags are still seen and adds the value
// to their sets, in the same step: on one server, where one script may
// touch a value's keys and its tags' together.
func (s *Space) StoreTagged(sc redisutil.Call, tags, seen []string) redisutil.Call {
	sc.Script = script.StoreTagged
	for i, t := range tags {
		set, epoch := s.TagKeys(t)
		sc.Keys = append(sc.Keys, set, epoch)
		sc.Args = append(sc.Args, seen[i])
	}
	return sc
}

// TagFirst adds the value keys vks, to be stored for ttls, to the sets of
// tags, whose epochs compute saw as seen, where a tag's keys live on other
// nodes than a value's (a Cluster, a Ring), before their stores; it reports which
// an InvalidateTag has overtaken: one of its tags' epochs is no longer the
// one compute saw (or could not be read). Those are not stored. A value in
// its tags' sets before its store is voided by any InvalidateTag that
// moves a set aside after that (its store is then refused, or the value
// deleted, before the InvalidateTag returns), and one whose epoch moved
// before is never stored: no value tagged before an InvalidateTag is
// served after it returned, and no waiter is handed one meanwhile.
func (s *Space) TagFirst(ctx context.Context, tags, seen, vks []string, ttls []time.Duration) (overtaken []bool) {
	var calls []redisutil.Call
	for i, vk := range vks {
		calls = append(calls, s.TagCalls(vk, ttls[i], tags)...)
	}
	cmds := redisutil.RunScripts(ctx, s.Client, calls)
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

// Invalidation by group, fleet-wide: InvalidateTag voids the values of a
// tag (TagCalls and StoreTagged add values to a tag's set), Clear every
// value of the Cache. Both work a batch at a time, so that Redis serves its
// other clients in between, and drop this process's copies and flights at
// once (Space.Forget).

// TagBatch is how many values InvalidateTag voids in one pipeline: small
// enough that Redis, which runs a pipeline's scripts back to back, serves
// its other clients every millisecond or two.
const TagBatch = 256

// Invalidate bumps t's epoch and moves its set aside, then voids the
// values of every set aside of t a batch at a time: its own, and any that
// another InvalidateTag of t is still working through, or left behind when
// it failed. Members are removed only once voided, so that however many
// InvalidateTag calls of t run at once, none returns while a value it
// should void is still served (two may void a value twice; that is
// harmless). On an error the values not yet voided stay aside, for the
// next InvalidateTag of t.
func (s *Space) Invalidate(ctx context.Context, t string) error {
	set, epoch := s.TagKeys(t)
	registry := s.Prefix + tagRegistryName + redisutil.Tag(t)
	aside := set + ":" + redisutil.Token() // same hash tag: same slot
	asides, err := script.TagBump.Run(ctx, s.Client, []string{epoch, set, registry, aside}, redisutil.Millis(EpochLife)).StringSlice()
	if err != nil {
		return err
	}
	for _, a := range asides {
		if err := s.drain(ctx, registry, a); err != nil {
			return err
		}
	}
	return nil
}

// drain voids the values of aside, a set of t's value keys moved aside,
// until it is empty, and then drops it from t's registry of asides.
func (s *Space) drain(ctx context.Context, registry, aside string) error {
	for {
		vks, err := s.Client.SRandMemberN(ctx, aside, TagBatch).Result()
		if err != nil {
			return err
		}
		if len(vks) == 0 { // nothing is added to a set once it is aside
			return s.Client.SRem(ctx, registry, aside).Err()
		}
		if err := s.Void(ctx, vks); err != nil {
			return err
		}
		if err := s.Client.SRem(ctx, aside, anySlice(vks)...).Err(); err != nil {
			return err
		}
	}
}

// Void makes the values vks a miss (or stale), in one pipeline, and drops
// this process's copies and flights of them.
func (s *Space) Void(ctx context.Context, vks []string) error {
	calls := make([]redisutil.Call, len(vks))
	stale := redisutil.Millis(s.Stale)
	for i, vk := range vks {
		ks := For(vk)
		calls[i] = redisutil.Call{Script: script.Void, Keys: []string{ks.Value, ks.Lock, ks.Channel}, Args: []any{s.Publish, stale}}
	}
	err := redisutil.FirstErr(redisutil.RunScripts(ctx, s.Client, calls))
	for _, vk := range vks {
		s.Forget(vk)
	}
	return err
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
