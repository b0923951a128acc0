package dogpile

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// Tags: values computed with Tag (see result.go) or stored by SetTagged
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
		calls[i] = scriptCall{tagAddScript, []string{set, epoch}, []any{vk, redisutil.Millis(ttl)}}
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
	sc.s = storeTaggedScript
	for i, t := range tags {
		set, epoch := c.tagKeys(t)
		sc.keys = append(sc.keys, set, epoch)
		sc.args = append(sc.args, seen[i])
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
	cmds := c.runPipelined(ctx, calls)
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

// tagLua adds value key vk, stored for ttl ms, to the set of a tag, and
// makes the set live at least as long.
const tagLua = `
local function tagadd(set, vk, ttl)
  redis.call('SADD', set, vk)
  local p = redis.call('PTTL', set)
  if p < tonumber(ttl) then redis.call('PEXPIRE', set, ttl) end
end
`

// storeTaggedScript is storeScript for a value with tags, on a server that
// holds every key (not a Cluster or a Ring): if an epoch is no longer what
// compute saw when it tagged the value (an InvalidateTag came since), it
// stores nothing, releases the lock and wakes the waiters, who look again,
// and returns -1; else it stores the value and adds it to each tag's set.
// KEYS: value, lock, channel, then each tag's set and epoch. ARGV: as
// storeScript, then each tag's epoch as compute saw it ("" for none).
var storeTaggedScript = redis.NewScript(storeLua + tagLua + `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local n = (#KEYS - 3) / 2
for i = 1, n do
  if (redis.call('GET', KEYS[3 + 2*i]) or '') ~= ARGV[5 + i] then
    redis.call('DEL', KEYS[2])
    redis.call(ARGV[4], KEYS[3], '` + wake.Released + `')
    return -1
  end
end
if ARGV[3] ~= '0' then
  for i = 1, n do tagadd(KEYS[2 + 2*i], KEYS[1], ARGV[3]) end
end
return store(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
`)

// tagAddScript adds a value key to a tag's set, where the tag's keys live
// in another slot than the value's (a Cluster, a Ring), and returns the
// tag's epoch ("" for none) so that the caller can tell whether an
// InvalidateTag came since compute tagged the value. KEYS: set, epoch.
// ARGV: value key, its ttl ms.
var tagAddScript = redis.NewScript(tagLua + `
tagadd(KEYS[1], ARGV[1], ARGV[2])
return redis.call('GET', KEYS[2]) or ''
`)

// storeCall is the script call of store.
func (c *core[T]) storeCall(ks keys, token string, b []byte, ttl time.Duration) scriptCall {
	return scriptCall{storeScript, []string{ks.value, ks.lock, ks.channel},
		[]any{token, b, redisutil.Millis(ttl), c.publish, maxWakeValue}}
}
