package dogpile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A backend makes clients for one Redis server or cluster; each client
// stands for one process (its own pool and its own wake-up connection).
type backend struct {
	name    string
	cluster bool
	client  func(t *testing.T) redis.UniversalClient
	// advance, if set, moves the server's clock: miniredis expires keys
	// only when told to.
	advance func(time.Duration)
}

func serverBackend(t *testing.T) backend {
	s := redistest.StartServer(t)
	return backend{name: "redis", client: func(t *testing.T) redis.UniversalClient { return s.Client(t) }}
}

func clusterBackend(t *testing.T) backend {
	cl := redistest.StartCluster(t, 3)
	return backend{name: "cluster", cluster: true, client: func(t *testing.T) redis.UniversalClient { return cl.Client(t) }}
}

func ringBackend(t *testing.T) backend {
	r := redistest.StartRing(t, 2)
	return backend{name: "ring", client: func(t *testing.T) redis.UniversalClient { return r.Client(t) }}
}

func sentinelBackend(t *testing.T) backend {
	s := redistest.StartSentinel(t)
	return backend{name: "sentinel", client: func(t *testing.T) redis.UniversalClient { return s.Client(t) }}
}

func miniBackend(t *testing.T) backend {
	m := miniredis.RunT(t)
	return backend{
		name: "miniredis",
		client: func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		advance: m.FastForward,
	}
}

// compute counts its calls in a Redis counter (so that calls in every
// process add up) and in memory.
type counted struct {
	rdb     redis.UniversalClient
	counter string
	local   atomic.Int64
}

func (c *counted) count(ctx context.Context) {
	c.local.Add(1)
	c.rdb.Incr(ctx, c.counter)
}

func (c *counted) total(t *testing.T) int64 {
	t.Helper()
	n, err := c.rdb.Get(context.Background(), c.counter).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("read counter: %v", err)
	}
	return n
}

// waitSignal returns a hook for Cache.onWait that closes the returned
// channel the first time a flight starts waiting.
func waitSignal() (func(string), <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(string) { once.Do(func() { close(ch) }) }, ch
}

func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", name)
		}
	}()
	f()
}

// nopClient returns a client that is never used for I/O (New does none).
func nopClient(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
