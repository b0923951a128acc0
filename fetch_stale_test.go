package dogpile_test

// WithStale: a value past its TTL is served at once, in every process,
// while one process refreshes it in the background. Cases of the behaviour
// suite (fetch_test.go); across processes, see
// fleet_stale_takeover_test.go.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func testStaleServedWhileOneRefreshes(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Minute))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Minute))
	_, err := a.Fetch(ctx, "k", 100*time.Millisecond, redistest.Constant("v1"))
	require.NoError(t, err)
	pass(b, 150*time.Millisecond)

	var computes atomic.Int32
	release := make(chan struct{})
	refresh := func(context.Context) (string, error) {
		computes.Add(1)
		<-release
		return "v2", nil
	}
	// Both "processes" answer at once with the stale value while one of
	// them refreshes; the other's refresh finds the lock taken.
	for _, c := range []*dogpile.Cache[string]{a, o, a, o} {
		if v, err := c.Fetch(ctx, "k", time.Minute, refresh); v != "v1" || err != nil {
			t.Fatalf("Fetch of a stale value = %q, %v; want v1 at once", v, err)
		}
	}
	// Which process refreshes is a race; the other finds the lock taken, or
	// the value refreshed, and computes nothing.
	redistest.Eventually(t, "a refresh to start", func() bool { return computes.Load() > 0 })
	close(release)
	settle(t, a)
	settle(t, o)
	if n := computes.Load(); n != 1 {
		t.Errorf("refresh computes = %d; want 1", n)
	}
	if v, err := o.Fetch(ctx, "k", time.Minute, refresh); assert.NoError(t, err, "Fetch after the refresh = %q, %v; want v2", v, err) {
		assert.Equal(t, "v2", v, "Fetch after the refresh = %q, %v; want v2", v, err)
	}
	sa, so := a.Stats(), o.Stats()
	if sa.Stale != 2 || sa.Refreshes+so.Refreshes != 1 {
		t.Errorf("Stats = %+v and %+v; want Stale 2 each, one refresh in all", sa, so)
	}
}

func testStaleRefreshFailsThrottled(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	const retry, stale = 200 * time.Millisecond, 1500 * time.Millisecond
	cs := []*dogpile.Cache[string]{
		dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(stale), dogpile.WithRefreshRetry(retry)),
		dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(stale), dogpile.WithRefreshRetry(retry)),
	}
	_, err := cs[0].Fetch(ctx, "k", 50*time.Millisecond, redistest.Constant("v1"))
	require.NoError(t, err)
	pass(b, 60*time.Millisecond)
	var calls atomic.Int32
	errDB := errors.New("db down")
	failing := func(context.Context) (string, error) { calls.Add(1); return "", errDB }

	// Serve stale for 500ms (50 rounds of 10ms on miniredis's clock) while
	// every refresh fails: the backend sees at most one call per retry
	// interval from both processes together.
	start := time.Now()
	for i := 0; i < 50 && (b.Advance != nil || time.Since(start) < 500*time.Millisecond); i++ {
		c := cs[i%2]
		if v, err := c.Fetch(ctx, "k", 50*time.Millisecond, failing); v != "v1" || err != nil {
			t.Fatalf("Fetch while refreshes fail = %q, %v; want the stale v1", v, err)
		}
		settle(t, c)
		pass(b, 10*time.Millisecond)
	}
	elapsed := time.Since(start)
	if b.Advance != nil {
		elapsed = 500 * time.Millisecond // miniredis's clock moved 10ms a call
	}
	if n, most := calls.Load(), int32(elapsed/retry)+1; n < 2 || n > most {
		t.Errorf("backend calls in %v = %d; want 2..%d (one per %v)", elapsed, n, most, retry)
	}
	// Past TTL + stale the value is gone: a plain miss, with its error.
	pass(b, stale)
	if _, err := cs[1].Fetch(ctx, "k", 50*time.Millisecond, failing); !errors.Is(err, errDB) {
		t.Errorf("Fetch past the stale window: err = %v; want %v", err, errDB)
	}
}
