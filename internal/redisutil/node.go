package redisutil

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MustClient panics, its message starting with pkg, if client is nil: an
// untyped nil, or a nil pointer of a client type ((*redis.Client)(nil)),
// which passes a plain nil check and would panic only at the first
// command, far from the mistake.
func MustClient(pkg string, client redis.UniversalClient) {
	if client == nil {
		panic(pkg + ": nil redis client (a programmer error)")
	}
	if v := reflect.ValueOf(client); v.Kind() == reflect.Pointer && v.IsNil() {
		panic(fmt.Sprintf("%s: nil redis client: a nil %T (a programmer error)", pkg, client))
	}
}

// NodeOf returns the client of the server that holds key: a Cluster's
// master for its slot, a Ring's shard. It returns nil, and no error, for
// a client of one server (or of a type go-redis does not make): key lives
// on the client's own server.
func NodeOf(ctx context.Context, client redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Ring:
		return c.GetShardClientForKey(key)
	}
	return nil, nil
}

// Scan calls f with the keys of node n that match pattern, batch (SCAN's
// COUNT) at a time.
func Scan(ctx context.Context, n *redis.Client, pattern string, batch int64, f func(keys []string) error) error {
	var cursor uint64
	for {
		keys, next, err := n.Scan(ctx, cursor, pattern, batch).Result()
		if err != nil {
			return err
		}
		if err := f(keys); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// Unlink removes the keys of node n that pick picks, in one pipeline of
// one UNLINK per key: on a Cluster the keys of one node span slots, which
// one command may not.
func Unlink(ctx context.Context, n *redis.Client, keys []string, pick func(string) bool) error {
	keys = slices.DeleteFunc(keys, func(k string) bool { return !pick(k) })
	if len(keys) == 0 {
		return nil
	}
	return Pipelined(ctx, n, func(p redis.Pipeliner) {
		for _, k := range keys {
			p.Unlink(ctx, k)
		}
	})
}

// ForEachNode calls f for every master of a Cluster, or every shard of a
// Ring, at once, or for the client itself, and returns the first error.
func ForEachNode(ctx context.Context, client redis.UniversalClient, f func(context.Context, *redis.Client) error) error {
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

// GlobEscape escapes the characters that a SCAN MATCH pattern gives a
// meaning: a prefix is matched as it is.
func GlobEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}

// SlotGroups splits the indexes of the value keys vks into groups whose
// keys one script (or one MGET) may touch together: all of them on a single
// server, one group per hash slot on a cluster, and one per key on a ring
// or any other client (a ring's shards place keys by their own hash). No
// group is longer than maxGroup.
func SlotGroups(client redis.UniversalClient, vks []string, maxGroup int) [][]int {
	var groups [][]int
	add := func(g int, i int) int {
		if g < 0 || len(groups[g]) == maxGroup {
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
		return g
	}
	switch client.(type) {
	case *redis.Client:
		for i := 0; i < len(vks); i += maxGroup {
			g := make([]int, min(maxGroup, len(vks)-i))
			for n := range g {
				g[n] = i + n
			}
			groups = append(groups, g)
		}
	case *redis.ClusterClient:
		bySlot := map[int]int{}
		for i, k := range vks {
			s := Slot(k)
			g, ok := bySlot[s]
			if !ok {
				g = -1
			}
			bySlot[s] = add(g, i)
		}
	default:
		for i := range vks {
			add(-1, i)
		}
	}
	return groups
}
