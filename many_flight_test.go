package dogpile_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// FetchMany with the other flights of the fleet: a Fetch of this process, a
// dead holder, a stale value's background refresh, a caller that leaves.

// testManyJoinsFetch: a key that a Fetch of this process computes is not
// passed to FetchMany's compute: FetchMany joins that flight.
func testManyJoinsFetch(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	started, release := make(chan struct{}), make(chan struct{})
	fres := make(chan error, 1)
	go func() {
		v, err := c.Fetch(ctx, "a", time.Minute, func(context.Context) (string, error) {
			close(started)
			<-release
			return "v:a", nil
		})
		if err == nil && v != "v:a" {
			err = fmt.Errorf("Fetch = %q", v)
		}
		fres <- err
	}()
	<-started
	e := &echo{}
	mres := goFetchMany(t, c, []string{"a", "b"}, e.compute)
	// FetchMany computes b and waits for a's flight.
	redistest.Eventually(t, "FetchMany's compute", func() bool { return len(e.keys()) > 0 })
	close(release)
	wantAll(t, <-mres, []string{"a", "b"})
	assert.NoError(t, <-fres)
	if calls := e.keys(); len(calls) != 1 || !slices.Equal(calls[0], []string{"b"}) {
		t.Errorf("compute calls %v; want one, with b alone", calls)
	}
}

// testManyFetchJoinsMany: Fetch calls, here and in another instance, of a
// key that FetchMany computes share its compute.
func testManyFetchJoinsMany(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	other := dogpile.New[string](b.Client(t), prefix(t))
	e := &echo{gate: make(chan struct{}), started: make(chan struct{})}
	mres := goFetchMany(t, c, []string{"a", "b"}, e.compute)
	<-e.started
	hook, waiting := waitSignal()
	dogpile.OnWait(other, hook)
	var wg sync.WaitGroup
	for _, f := range []*dogpile.Cache[string]{c, other} {
		wg.Go(func() {
			if v, err := f.Fetch(ctx, "a", time.Minute, redistest.NoCompute[string]); assert.NoError(t, err, "Fetch = %q, %v; want v:a", v, err) {
				assert.Equal(t, "v:a", v, "Fetch = %q, %v; want v:a", v, err)
			}
		})
	}
	<-waiting
	redistest.Eventually(t, "the Fetch of this process to join the flight", func() bool { return c.Stats().Shared > 0 })
	close(e.gate)
	wg.Wait()
	wantAll(t, <-mres, []string{"a", "b"})
	if calls := e.keys(); len(calls) != 1 {
		t.Errorf("compute calls %v; want one", calls)
	}
}

// testManyTakesOverDeadHolder: a key locked by a holder that never
// stores is taken over once its lock expires, and computed alone.
func testManyTakesOverDeadHolder(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	// A lease longer than the dead lock: miniredis's clock, moved past the
	// dead lock below, must not take a's lock too.
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(3*time.Second))
	// The dead holder's lock outlives the time a loaded machine may take to
	// reach the lock script, so that FetchMany finds it held.
	require.NoError(t, dogpile.Client(c).Set(ctx, dogpile.KeysOf(c, "dead").Lock, "someone", time.Second).Err())
	if b.Advance != nil { // miniredis expires keys only when told to
		hook, waiting := waitSignal()
		dogpile.OnWait(c, hook)
		go func() { <-waiting; b.Advance(1100 * time.Millisecond) }()
	}
	e := &echo{}
	got, err := c.FetchMany(ctx, []string{"a", "dead"}, time.Minute, e.compute)
	require.NoError(t, err)
	wantAll(t, got, []string{"a", "dead"})
	calls := e.keys()
	slices.SortFunc(calls, func(x, y []string) int { return strings.Compare(x[0], y[0]) })
	if len(calls) != 2 || !slices.Equal(calls[0], []string{"a"}) || !slices.Equal(calls[1], []string{"dead"}) {
		t.Errorf("compute calls %v; want [a] then [dead] alone", calls)
	}
	if s := c.Stats(); s.Takeovers != 1 {
		t.Errorf("Takeovers = %d; want 1", s.Takeovers)
	}
}

// testManyStale: with WithStale, stale keys are returned at once and each
// is refreshed in the background with compute for that key alone.
func testManyStale(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Minute))
	for _, k := range []string{"s1", "s2"} {
		require.NoError(t, c.Set(ctx, k, "old", 100*time.Millisecond))
	}
	require.NoError(t, c.Set(ctx, "fresh", "v:fresh", time.Minute))
	pass(b, 200*time.Millisecond)
	e := &echo{}
	got, err := c.FetchMany(ctx, []string{"s1", "s2", "fresh"}, time.Minute, e.compute)
	require.NoError(t, err)
	if want := map[string]string{"s1": "old", "s2": "old", "fresh": "v:fresh"}; !maps.Equal(got, want) {
		t.Errorf("FetchMany = %v; want %v (stale values at once)", got, want)
	}
	settle(t, c)
	calls := e.keys()
	slices.SortFunc(calls, func(x, y []string) int { return strings.Compare(x[0], y[0]) })
	if len(calls) != 2 || !slices.Equal(calls[0], []string{"s1"}) || !slices.Equal(calls[1], []string{"s2"}) {
		t.Errorf("refresh computes %v; want [s1] and [s2], each alone", calls)
	}
	if s := c.Stats(); s.Stale != 2 || s.Refreshes != 2 {
		t.Errorf("Stats = %+v; want Stale 2, Refreshes 2", s)
	}
	for _, k := range []string{"s1", "s2"} {
		if v, err := c.Get(ctx, k); assert.NoError(t, err, "Get(%s) after the refresh = %q, %v", k, v, err) {
			assert.Equal(t, "v:"+k, v, "Get(%s) after the refresh = %q, %v", k, v, err)
		}
	}
}

// TestFetchManyCallerLeaves: a caller whose ctx ends while compute runs
// gets the hits it has and ctx's error at once; compute runs on and its
// values are stored for the next caller.
func TestFetchManyCallerLeaves(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	c := dogpile.New[string](rdb, prefix(t))
	require.NoError(t, c.Set(t.Context(), "hit", "v:hit", time.Minute))
	e := &echo{gate: make(chan struct{}), started: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	var got map[string]string
	go func() {
		var err error
		got, err = c.FetchMany(ctx, []string{"hit", "a", "b"}, time.Minute, e.compute)
		res <- err
	}()
	<-e.started
	cancel()
	if err := <-res; err != context.Canceled {
		t.Errorf("FetchMany error = %v; want context.Canceled", err)
	}
	if got["hit"] != "v:hit" || len(got) != 1 {
		t.Errorf("FetchMany = %v; want the hit alone", got)
	}
	close(e.gate)
	// The compute, abandoned by its caller, still stores: a new caller
	// joins its flight or reads the value.
	got, err := c.FetchMany(t.Context(), []string{"a", "b"}, time.Minute, redistest.NoComputeMany[string])
	require.NoError(t, err)
	wantAll(t, got, []string{"a", "b"})
	settle(t, c)
}

// goFetchMany calls c.FetchMany(keys, compute) on a goroutine of its own
// and sends its values on the channel it returns (an error fails t).
func goFetchMany(t *testing.T, c *dogpile.Cache[string], keys []string, compute func(context.Context, []string) (map[string]string, error)) <-chan map[string]string {
	res := make(chan map[string]string, 1)
	go func() {
		got, err := c.FetchMany(t.Context(), keys, time.Minute, compute)
		assert.NoError(t, err)
		res <- got
	}()
	return res
}
