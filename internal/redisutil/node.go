package redisutil

import (
	"context"

	"github.com/redis/go-redis/v9"
)

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
