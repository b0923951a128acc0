package dogpile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestRedisKilledDuringCompute: the server dies while the holder computes.
// The holder's callers get the value with the store error; later Fetch
// calls get a wrapped Redis error at once and do not compute, unless
// WithComputeWhenDown is set.
func TestRedisKilledDuringCompute(t *testing.T) {
	s := redistest.StartServer(t)
	c := New[int](noRetryClient(t, s))
	v, err := c.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) {
		s.Kill()
		return 4, nil
	})
	if v != 4 || err == nil || !strings.Contains(err.Error(), `dogpile: store "k"`) {
		t.Errorf("Fetch = %v, %v; want 4 and a store error", v, err)
	}

	computed := false
	_, err = c.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) {
		computed = true
		return 5, nil
	})
	if err == nil || !strings.HasPrefix(err.Error(), `dogpile: get "k"`) || computed {
		t.Errorf("Fetch with Redis down: err = %v, computed = %v; want a wrapped get error, no compute", err, computed)
	}

	open := New[int](noRetryClient(t, s), WithComputeWhenDown())
	v, err = open.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) { return 6, nil })
	if err != nil || v != 6 {
		t.Errorf("Fetch WithComputeWhenDown = %v, %v; want 6, nil", v, err)
	}
}

// TestRedisKilledWhileWaiting: a waiter must not hang when the server
// dies: its wake-up connection breaks, it looks again and gets an error.
func TestRedisKilledWhileWaiting(t *testing.T) {
	s := redistest.StartServer(t)
	holder := New[int](noRetryClient(t, s), WithLease(time.Minute))
	waiter := New[int](noRetryClient(t, s), WithLease(time.Minute))
	start := time.Now()
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) {
		return 1, nil
	})
	s.Kill()
	r := <-wres
	if r.err == nil || errors.Is(r.err, context.Canceled) {
		t.Errorf("waiter Fetch error = %v; want a Redis error", r.err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("waiter took %v to notice the dead server", d)
	}
	close(release)
	if r := <-hres; r.v != 1 || r.err == nil {
		t.Errorf("holder Fetch = %v, %v; want 1 and a store error", r.v, r.err)
	}
}

// TestRedisPausedCallerDeadline: with the server frozen, a caller's
// deadline still ends its Fetch on time (go-redis applies ctx deadlines to
// socket I/O only with ContextTimeoutEnabled).
func TestRedisPausedCallerDeadline(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := New[int](rdb)
	if err := c.Set(t.Context(), "k", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	defer s.Resume()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Fetch(ctx, "k", time.Minute, nil2[int])
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Fetch error = %v; want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Fetch took %v past a 100ms deadline", d)
	}
}

// noRetryClient returns a client that does not retry failed commands, so
// that tests of a dead server do not wait out go-redis's retry backoff.
func noRetryClient(t *testing.T, s *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
