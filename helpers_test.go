package dogpile_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The helpers of the behaviour tests (package dogpile_test); those of the
// white-box tests are in helpers_internal_test.go.

// prefix gives each test keys of its own (its name is the prefix), so that
// the cases of a suite share one deployment.
func prefix(t *testing.T) dogpile.Option { return dogpile.WithPrefix(t.Name() + ":") }

// pass lets d go by on the server's clock: miniredis is told to, a real
// server is waited for (on purpose: a TTL must run out).
func pass(b redistest.Backend, d time.Duration) {
	if b.Advance != nil {
		b.Advance(d)
		return
	}
	time.Sleep(d)
}

// settle waits until c runs no background refresh (they outlive the Fetch
// that started them), so that each test ends with no goroutine of its own.
func settle[T any](t *testing.T, c *dogpile.Cache[T]) {
	t.Helper()
	redistest.Eventually(t, "the background work to end", func() bool { return dogpile.Flights(c) == 0 })
}

// counted counts its calls in a Redis counter (so that calls in every
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
		require.NoError(t, err, "read counter")
	}
	return n
}

// waitSignal returns a hook for dogpile.OnWait that closes the returned
// channel the first time a flight starts waiting.
func waitSignal() (func(string), <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(string) { once.Do(func() { close(ch) }) }, ch
}

// holdAndWait starts a compute of key in holder that blocks until release
// is closed, and a Fetch of key in waiter; it returns once the waiter
// waits for the holder.
func holdAndWait[T any](t *testing.T, holder, waiter *dogpile.Cache[T], ctx context.Context, key string, compute func(context.Context) (T, error)) (release chan struct{}, holderRes, waiterRes chan result[T]) {
	t.Helper()
	release = make(chan struct{})
	computing := make(chan struct{})
	holderRes, waiterRes = make(chan result[T], 1), make(chan result[T], 1)
	go func() {
		v, err := holder.Fetch(t.Context(), key, time.Minute, func(ctx context.Context) (T, error) {
			close(computing)
			<-release
			return compute(ctx)
		})
		holderRes <- result[T]{v, err}
	}()
	<-computing
	hook, waiting := waitSignal()
	dogpile.OnWait(waiter, hook)
	go func() {
		v, err := waiter.Fetch(ctx, key, time.Minute, func(ctx context.Context) (T, error) {
			var zero T
			return zero, errors.New("waiter computed; want it to wait")
		})
		waiterRes <- result[T]{v, err}
	}()
	select {
	case <-waiting:
	case r := <-waiterRes:
		t.Fatalf("waiter returned %v, %v before waiting", r.v, r.err)
	}
	return release, holderRes, waiterRes
}

type result[T any] struct {
	v   T
	err error
}

func assertNothingStored[T any](t *testing.T, c *dogpile.Cache[T], key string) {
	t.Helper()
	ks := dogpile.KeysOf(c, key)
	n, err := dogpile.Client(c).Exists(context.Background(), ks.Value, ks.Lock).Result()
	assert.True(t, err == nil && n == 0, "EXISTS value lock = %d, %v; want 0 (nothing cached, lock released)", n, err)
}

func mustPanic(t *testing.T, name string, f func()) {
	t.Helper()
	assert.Panics(t, f, "%s did not panic", name)
}
