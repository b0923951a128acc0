package dogpile

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestFetchManyCallerLeaves: a caller whose ctx ends while compute runs
// gets the hits it has and ctx's error at once; compute runs on and its
// values are stored for the next caller.
func TestFetchManyCallerLeaves(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	c := New[string](rdb, prefix(t))
	if err := c.Set(t.Context(), "hit", "v:hit", time.Minute); err != nil {
		t.Fatal(err)
	}
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
	got, err := c.FetchMany(t.Context(), []string{"a", "b"}, time.Minute, nilMany[string])
	if err != nil {
		t.Fatal(err)
	}
	wantAll(t, got, []string{"a", "b"})
	settle(t, c)
}

// TestFetchManyObserver: one compute call is one ComputeStart and one
// ComputeEnd, with every key in Keys; each key is a hit or a miss.
func TestFetchManyObserver(t *testing.T) {
	rec := &recorder{}
	c := New[string](redistest.StartServer(t).Client(t), prefix(t), WithObserver(rec.observe))
	if err := c.Set(t.Context(), "hit", "v:hit", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FetchMany(t.Context(), []string{"hit", "a", "b"}, time.Minute, (&echo{}).compute); err != nil {
		t.Fatal(err)
	}
	kinds := rec.kinds()
	count := func(k EventKind) int {
		return len(slices.DeleteFunc(slices.Clone(kinds), func(x EventKind) bool { return x != k }))
	}
	if count(EventComputeStart) != 1 || count(EventComputeEnd) != 1 || count(EventHit) != 1 || count(EventMiss) != 2 {
		t.Errorf("events %v; want 1 compute start and end, 1 hit, 2 misses", kinds)
	}
	if e, ok := rec.find(EventComputeEnd); !ok || !slices.Equal(e.Keys, []string{"a", "b"}) || e.Key != "a" {
		t.Errorf("ComputeEnd = %+v; want Keys [a b], Key a", e)
	}
}

// TestFetchManyRedisDown: with Redis unreachable FetchMany returns an
// error per key and does not compute, unless WithComputeWhenDown is set.
func TestFetchManyRedisDown(t *testing.T) {
	s := redistest.StartServer(t)
	s.Kill()
	c := New[string](noRetryClient(t, s))
	got, err := c.FetchMany(t.Context(), []string{"a", "b"}, time.Minute, nilMany[string])
	if len(got) != 0 || err == nil || !strings.Contains(err.Error(), `dogpile: get "a"`) || !strings.Contains(err.Error(), `dogpile: get "b"`) {
		t.Errorf("FetchMany with Redis down = %v, %v; want nothing and a get error per key", got, err)
	}
	open := New[string](noRetryClient(t, s), WithComputeWhenDown())
	e := &echo{}
	got, err = open.FetchMany(t.Context(), []string{"a", "b"}, time.Minute, e.compute)
	if err != nil {
		t.Fatal(err)
	}
	wantAll(t, got, []string{"a", "b"})
	if calls := e.keys(); len(calls) != 1 {
		t.Errorf("compute calls %v; want one, without the cache", calls)
	}
}
