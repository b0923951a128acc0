package dogpile

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Clear deletes, rather than bumping a generation that every key name
// would carry: a generation must be read before every hit (a second
// command, or a stale copy of it in each process, which would let a
// cleared value be served), and the old values would fill memory until
// their TTLs. SCAN and UNLINK cost Redis work in proportion to the keys,
// spread over many small steps; a hit stays one GET.

// clearBatch is how many keys one SCAN asks for, and one pipeline of
// UNLINKs removes: small steps, so that Redis serves other clients in
// between.
const clearBatch = 1000

// clear removes the keys in passes over every node's keys. First the
// values with their locks: after that pass, no compute that held a lock
// when Clear began can store, so removing an epoch that it read cannot let
// a value tagged before an InvalidateTag through. Then the tags' keys. If
// a tag's set went, the values again: one stored during the first pass,
// which SCAN may miss, would be left in no tag's set, where no
// InvalidateTag would find it.
func (c *core[T]) clear(ctx context.Context) error {
	p := redisutil.GlobEscape(c.opts.prefix)
	values := func(ctx context.Context, n *redis.Client) error {
		return redisutil.Scan(ctx, n, p+"{*", clearBatch, func(keys []string) error {
			return redisutil.Unlink(ctx, n, keys, func(k string) bool { return c.kindOf(k) == perKey })
		})
	}
	if err := redisutil.ForEachNode(ctx, c.client, values); err != nil {
		return err
	}
	var sets atomic.Bool
	err := redisutil.ForEachNode(ctx, c.client, func(ctx context.Context, n *redis.Client) error {
		return redisutil.Scan(ctx, n, p+"tag*", clearBatch, func(keys []string) error {
			return c.clearTags(ctx, n, keys, &sets)
		})
	})
	if err != nil || !sets.Load() {
		return err
	}
	return redisutil.ForEachNode(ctx, c.client, values)
}

// clearTags removes, of keys (one SCAN batch of node n), the tags' sets and
// epochs; it voids the values of the sets aside that a registry lists, as
// InvalidateTag does (see drain), so that one running now does not return
// while they are served; and it records in sets whether it removed a set.
func (c *core[T]) clearTags(ctx context.Context, n *redis.Client, keys []string, sets *atomic.Bool) error {
	for _, k := range keys {
		if c.kindOf(k) != tagRegistry {
			continue
		}
		asides, err := n.SMembers(ctx, k).Result()
		if err != nil {
			return err
		}
		for _, a := range asides {
			if err := c.drain(ctx, k, a); err != nil {
				return err
			}
		}
	}
	return redisutil.Unlink(ctx, n, keys, func(k string) bool {
		switch c.kindOf(k) {
		case tagSet:
			sets.Store(true)
			return true
		case tagEpoch:
			return true
		}
		return false // a set aside goes once drained, with its registry
	})
}

// A keyKind is what a key is to a Cache, told from its name.
type keyKind int

const (
	foreign     keyKind = iota // not a key of this Cache
	perKey                     // a cache key's value, lock, error records or retry mark
	tagSet                     // a tag's set of value keys
	tagAside                   // a tag's set moved aside by an InvalidateTag
	tagEpoch                   // a tag's epoch
	tagRegistry                // a tag's registry of sets moved aside
)

// perKeySuffixes follow a cache key's hash tag in the names of its keys.
var perKeySuffixes = keysFor("")

// kindOf tells what key is, from its name: the Cache's prefix, a hash tag
// as redisutil.Tag makes one, and what the Cache puts around it (see keysFor
// and tagKeys).
func (c *core[T]) kindOf(key string) keyKind {
	rest, ok := strings.CutPrefix(key, c.opts.prefix)
	if !ok {
		return foreign
	}
	if suffix, ok := afterTag(rest); ok {
		switch ks := perKeySuffixes; suffix {
		case ks.value, ks.lock, ks.errs, ks.throttle:
			return perKey
		}
		return foreign
	}
	for _, tk := range tagKinds {
		t, ok := strings.CutPrefix(rest, tk.name)
		if !ok {
			continue
		}
		suffix, ok := afterTag(t)
		switch {
		case ok && suffix == "":
			return tk.kind
		case ok && tk.kind == tagSet && strings.HasPrefix(suffix, ":") && redisutil.IsToken(suffix[1:]):
			return tagAside
		}
		return foreign
	}
	return foreign
}

// tagKinds are the keys of a tag by the names that follow the prefix.
var tagKinds = []struct {
	name string
	kind keyKind
}{{tagSetName, tagSet}, {tagEpochName, tagEpoch}, {tagRegistryName, tagRegistry}}

// afterTag returns what follows the hash tag that s starts with, if it
// starts with one made by redisutil.Tag: "{name}", name not empty and
// without braces, or "{hash}#", hash 32 hex digits.
func afterTag(s string) (string, bool) {
	inner, ok := strings.CutPrefix(s, "{")
	if !ok {
		return "", false
	}
	name, rest, ok := strings.Cut(inner, "}")
	switch {
	case !ok || name == "" || strings.Contains(name, "{"):
		return "", false
	case strings.HasPrefix(rest, "#"):
		return rest[1:], len(name) == hashedTagLen && strings.Trim(name, "0123456789abcdef") == ""
	}
	return rest, true
}

// hashedTagLen is the length of the hash that stands for a name with a
// brace in a hash tag (see redisutil.Tag).
const hashedTagLen = 32

// Clear removes every key the Cache wrote, on every node (values, locks, tags),
// and no other key, even under its prefix. A compute in progress anywhere loses
// its lock, as after [Cache.Delete], and near tiers drop their copies. A value
// stored while Clear runs may survive it. Clear returns the first error a node
// reported, with that node's keys perhaps partly removed.
func (c *Cache[T]) Clear(ctx context.Context) error {
	if c.life.Done() {
		return ErrClosed
	}
	err := c.clear(ctx)
	// After the deletes, as Set does after its write (see forget).
	c.flights.ForgetAll()
	c.near.ForgetAll()
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "clear", c.opts.prefix, err)
	}
	return nil
}
