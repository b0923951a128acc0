package redistest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A Backend is one kind of Redis deployment that a behaviour suite must
// work on: every go-redis client type a user may hand the library.
type Backend struct {
	// Name is "server", "cluster", "ring", "sentinel" or "miniredis".
	Name string
	// Cluster reports a Redis Cluster, where pub/sub is sharded.
	Cluster bool
	// Client returns a new client of the deployment; tb.Cleanup closes
	// it. Each client stands for one process: its own pool and its own
	// wake-up connections.
	Client func(tb testing.TB) redis.UniversalClient
	// Advance, set only for [Miniredis], moves the server's clock:
	// miniredis expires keys only when told to. Real servers' clocks run
	// by themselves.
	Advance func(time.Duration)
}

// The deployments a Backend may be: a private redis-server
// ([redis.Client]), a 3-master Redis Cluster ([redis.ClusterClient]), a
// 2-shard [redis.Ring], and a master with a replica behind a sentinel
// ([redis.NewFailoverClient]).
var backends = []struct {
	name    string
	cluster bool
	start   func(tb testing.TB) func(tb testing.TB) redis.UniversalClient
}{
	{"server", false, func(tb testing.TB) func(testing.TB) redis.UniversalClient {
		s := StartServer(tb)
		return func(tb testing.TB) redis.UniversalClient { return s.Client(tb) }
	}},
	{"cluster", true, func(tb testing.TB) func(testing.TB) redis.UniversalClient {
		c := StartCluster(tb, 3)
		return func(tb testing.TB) redis.UniversalClient { return c.Client(tb) }
	}},
	{"ring", false, func(tb testing.TB) func(testing.TB) redis.UniversalClient {
		r := StartRing(tb, 2)
		return func(tb testing.TB) redis.UniversalClient { return r.Client(tb) }
	}},
	{"sentinel", false, func(tb testing.TB) func(testing.TB) redis.UniversalClient {
		s := StartSentinel(tb)
		return func(tb testing.TB) redis.UniversalClient { return s.Client(tb) }
	}},
}

// ForEachBackend runs f as a subtest, named for the backend, on a fresh
// deployment of each kind, started inside the subtest (so that one that
// cannot start skips or fails alone, like [StartServer]).
func ForEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	t.Helper()
	forEachBackend(t, false, f)
}

// ForEachBackendParallel is ForEachBackend with the deployments'
// subtests run in parallel with each other, as [Suite.Run] runs them: f
// must touch no package-level state, only its own deployment's keys.
func ForEachBackendParallel(t *testing.T, f func(t *testing.T, b Backend)) {
	t.Helper()
	forEachBackend(t, true, f)
}

// forEachBackend is ForEachBackend, whose subtests run in parallel with
// each other if parallel is set (see [Suite.Run]).
func forEachBackend(t *testing.T, parallel bool, f func(t *testing.T, b Backend)) {
	t.Helper()
	for _, k := range backends {
		t.Run(k.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			f(t, Backend{Name: k.name, Cluster: k.cluster, Client: k.start(t)})
		})
	}
}

// Miniredis returns an embedded miniredis as a Backend named "miniredis",
// for suites that also prove the library works on it (the demos' fallback).
// Its keys expire only through [Backend.Advance].
func Miniredis(tb testing.TB) Backend {
	m := miniredis.RunT(tb)
	return Backend{
		Name: "miniredis",
		Client: func(tb testing.TB) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			tb.Cleanup(func() { _ = c.Close() })
			return c
		},
		Advance: m.FastForward,
	}
}

// Clients returns n clients of b, standing for n processes.
func (b Backend) Clients(tb testing.TB, n int) []redis.UniversalClient {
	tb.Helper()
	cs := make([]redis.UniversalClient, n)
	for i := range cs {
		cs[i] = b.Client(tb)
	}
	return cs
}
