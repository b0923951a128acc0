package keyspace

import (
	"context"
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

// ClearBatch is how many keys one SCAN asks for, and one pipeline of
// UNLINKs removes: small steps, so that Redis serves other clients in
// between.
const ClearBatch = 1000

// Clear removes the Cache's keys in passes over every node's keys. First the
// values with their locks: after that pass, no compute that held a lock
// when Clear began can store, so removing an epoch that it read cannot let
// a value tagged before an InvalidateTag through. Then the tags' keys. If
// a tag's set went, the values again: one stored during the first pass,
// which SCAN may miss, would be left in no tag's set, where no
// InvalidateTag would find it.
func (s *Space) Clear(ctx context.Context) error {
	p := redisutil.GlobEscape(s.Prefix)
	values := func(ctx context.Context, n *redis.Client) error {
		return redisutil.Scan(ctx, n, p+"{*", ClearBatch, func(keys []string) error {
			return redisutil.Unlink(ctx, n, keys, func(k string) bool { return s.Kind(k) == PerKey })
		})
	}
	if err := redisutil.ForEachNode(ctx, s.Client, values); err != nil {
		return err
	}
	var sets atomic.Bool
	err := redisutil.ForEachNode(ctx, s.Client, func(ctx context.Context, n *redis.Client) error {
		return redisutil.Scan(ctx, n, p+"tag*", ClearBatch, func(keys []string) error {
			return s.clearTags(ctx, n, keys, &sets)
		})
	})
	if err != nil || !sets.Load() {
		return err
	}
	return redisutil.ForEachNode(ctx, s.Client, values)
}

// clearTags removes, of keys (one SCAN batch of node n), the tags' sets and
// epochs; it voids the values of the sets aside that a registry lists, as
// InvalidateTag does (see drain), so that one running now does not return
// while they are served; and it records in sets whether it removed a set.
func (s *Space) clearTags(ctx context.Context, n *redis.Client, keys []string, sets *atomic.Bool) error {
	for _, k := range keys {
		if s.Kind(k) != TagRegistry {
			continue
		}
		asides, err := n.SMembers(ctx, k).Result()
		if err != nil {
			return err
		}
		for _, a := range asides {
			if err := s.drain(ctx, k, a); err != nil {
				return err
			}
		}
	}
	return redisutil.Unlink(ctx, n, keys, func(k string) bool {
		switch s.Kind(k) {
		case TagSet:
			sets.Store(true)
			return true
		case TagEpoch:
			return true
		}
		return false // a set aside goes once drained, with its registry
	})
}
