package dogpile

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Clear: every value of a Cache, fleet-wide.

// clearBatch is how many keys one SCAN asks for, and one pipeline of
// UNLINKs removes: small steps, so that Redis serves other clients in
// between.
const clearBatch = 1000

// Clear removes every value of the Cache, and every compute lock, error
// record and retry mark that goes with one: every key under its prefix (see
// [WithPrefix]; the keys of the lock package, and of Caches with other
// prefixes, are left alone), on every master of a Cluster or shard of a
// Ring. A compute running anywhere at that moment loses its lock, so its
// value is not stored (as after [Cache.Delete]); near tiers in every
// process drop their copies as Redis reports each deletion, and this
// process's at once. Clear walks the keyspace with SCAN and removes keys
// with UNLINK, a thousand at a time, so Redis is never blocked for long;
// a value stored while Clear runs may survive it. Clear returns the first
// error a node reported (the keys of that node may be partly removed).
func (c *Cache[T]) Clear(ctx context.Context) error {
	if c.life.done() {
		return ErrClosed
	}
	pattern := globEscape(c.opts.prefix) + "{*"
	err := forEachNode(ctx, c.client, func(ctx context.Context, n *redis.Client) error {
		return clearNode(ctx, n, pattern)
	})
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

// clearNode removes the keys of one node that match pattern.
func clearNode(ctx context.Context, n *redis.Client, pattern string) error {
	var cursor uint64
	for {
		keys, next, err := n.Scan(ctx, cursor, pattern, clearBatch).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			// One key per UNLINK: on a Cluster the keys of one node span
			// slots, which one command may not.
			if _, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Unlink(ctx, k)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// forEachNode calls f for every master of a Cluster, or every shard of a
// Ring, at once, or for the client itself, and returns the first error.
func forEachNode(ctx context.Context, client redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, f)
	case *redis.Ring:
		return c.ForEachShard(ctx, f)
	case *redis.Client:
		return f(ctx, c)
	}
	return fmt.Errorf("a client of type %T", client)
}

// globEscape escapes the characters that a SCAN MATCH pattern gives a
// meaning: a prefix is matched as it is.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
