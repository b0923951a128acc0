package lock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// onClient makes a suite case of a test that needs one client of the
// backend: one process.
func onClient(f func(*testing.T, redis.UniversalClient)) func(*testing.T, redistest.Backend) {
	return func(t *testing.T, b redistest.Backend) { f(t, b.Client(t)) }
}

// onServerAndCluster runs f on a fresh client of a private redis-server
// and of a Redis Cluster.
func onServerAndCluster(t *testing.T, f func(*testing.T, redis.UniversalClient)) {
	t.Run("server", func(t *testing.T) { f(t, redistest.StartServer(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.StartCluster(t, 3).Client(t)) })
}
