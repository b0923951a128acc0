package redisutil

import (
	"context"
	"fmt"
	"reflect"

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
