package dogpile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A backend makes clients for one deployment (see redistest.Backend);
// each client stands for one process (its own pool and its own wake-up
// connection).
type backend struct {
	name    string
	cluster bool
	client  func(t *testing.T) redis.UniversalClient
	// advance, if set, moves the server's clock: miniredis expires keys
	// only when told to.
	advance func(time.Duration)
}

func fromBackend(b redistest.Backend) backend {
	return backend{
		name:    b.Name,
		cluster: b.Cluster,
		client:  func(t *testing.T) redis.UniversalClient { return b.Client(t) },
		advance: b.Advance,
	}
}

// A suite is a list of behaviour tests, each run on one backend.
type suite []struct {
	name string
	f    func(t *testing.T, b backend)
}

// run runs the suite on every deployment redistest knows (a server, a
// 3-master cluster, a 2-shard ring, a failover client behind a sentinel)
// and on miniredis, the demos' fallback. Each deployment serves the whole
// suite: every test has its own keys (its name is the prefix).
func (s suite) run(t *testing.T) {
	each := func(t *testing.T, rb redistest.Backend) {
		b := fromBackend(rb)
		for _, tc := range s {
			t.Run(tc.name, func(t *testing.T) { tc.f(t, b) })
		}
	}
	redistest.ForEachBackend(t, each)
	t.Run("miniredis", func(t *testing.T) { each(t, redistest.Miniredis(t)) })
}

func serverBackend(t *testing.T) backend {
	s := redistest.StartServer(t)
	return backend{name: "server", client: func(t *testing.T) redis.UniversalClient { return s.Client(t) }}
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
