package dogpile_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The FetchMany tests run on every deployment, like Fetch's.
var batchSuite = redistest.Suite{
	{Name: "HitsAndMisses", Test: testManyHitsAndMisses},
	{Name: "Duplicates", Test: testManyDuplicates},
	{Name: "PartialMap", Test: testManyPartialMap},
	{Name: "NegativeTTL", Test: testManyNegativeTTL},
	{Name: "ComputeError", Test: testManyComputeError},
	{Name: "AcrossInstances", Test: testManyAcrossInstances},
	{Name: "WithFetch", Test: testManyWithFetch},
	{Name: "JoinsFetch", Test: testManyJoinsFetch},
	{Name: "FetchJoinsMany", Test: testManyFetchJoinsMany},
	{Name: "TakesOverDeadHolder", Test: testManyTakesOverDeadHolder},
	{Name: "Stale", Test: testManyStale},
}

func TestFetchMany(t *testing.T) {
	t.Parallel() // its own deployments; the cases touch no package state (see redistest.Suite)
	batchSuite.RunWithMiniredis(t)
}

// keyRange returns the keys prefix0 … prefix(n-1): spread over all slots.
func keyRange(p string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = p + strconv.Itoa(i)
	}
	return ks
}

// echo computes "v:"+key for each key, records each call's keys, and
// counts each key in the Redis hash counter (summed over processes).
type echo struct {
	mu      sync.Mutex
	calls   [][]string
	counter func(ctx context.Context, key string)
	gate    chan struct{} // if set, compute waits for it to close
	started chan struct{} // if set, closed when compute first starts
	once    sync.Once
}

func (e *echo) compute(ctx context.Context, keys []string) (map[string]string, error) {
	e.mu.Lock()
	e.calls = append(e.calls, slices.Clone(keys))
	e.mu.Unlock()
	if e.started != nil {
		e.once.Do(func() { close(e.started) })
	}
	if e.gate != nil {
		<-e.gate
	}
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		if e.counter != nil {
			e.counter(ctx, k)
		}
		m[k] = "v:" + k
	}
	return m, nil
}

func (e *echo) keys() [][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

func wantAll(t *testing.T, got map[string]string, keys []string) {
	t.Helper()
	for _, k := range keys {
		if got[k] != "v:"+k {
			t.Errorf("FetchMany()[%q] = %q; want %q", k, got[k], "v:"+k)
			return
		}
	}
	if len(got) != len(keys) {
		t.Errorf("FetchMany returned %d values; want %d", len(got), len(keys))
	}
}

func testManyHitsAndMisses(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	keys := keyRange("k", 50)
	for _, k := range keys[:20] {
		require.NoError(t, c.Set(ctx, k, "v:"+k, time.Minute))
	}
	e := &echo{}
	got, err := c.FetchMany(ctx, keys, time.Minute, e.compute)
	require.NoError(t, err)
	wantAll(t, got, keys)
	calls := e.keys()
	if len(calls) != 1 {
		t.Fatalf("compute called %d times; want once", len(calls))
	}
	if m := slices.Sorted(slices.Values(calls[0])); !slices.Equal(m, slices.Sorted(slices.Values(keys[20:]))) {
		t.Errorf("compute got %v; want exactly the 30 missing keys", m)
	}
	// Stored: a second call is all hits.
	got, err = c.FetchMany(ctx, keys, time.Minute, redistest.NoComputeMany[string])
	require.NoError(t, err)
	wantAll(t, got, keys)
	if s := c.Stats(); s.Hits != 70 || s.Misses != 30 || s.Computes != 1 {
		t.Errorf("Stats = %+v; want Hits 70, Misses 30, Computes 1", s)
	}
}

func testManyDuplicates(t *testing.T, b redistest.Backend) {
	c := dogpile.New[string](b.Client(t), prefix(t))
	e := &echo{}
	got, err := c.FetchMany(t.Context(), []string{"a", "b", "a", "a", "b"}, time.Minute, e.compute)
	require.NoError(t, err)
	wantAll(t, got, []string{"a", "b"})
	if calls := e.keys(); len(calls) != 1 || len(calls[0]) != 2 {
		t.Errorf("compute calls %v; want one with a and b once each", calls)
	}
}

// testManyPartialMap: a key compute leaves out is absent, with no error,
// and not stored (no negative TTL).
func testManyPartialMap(t *testing.T, b redistest.Backend) {
	c := dogpile.New[string](b.Client(t), prefix(t))
	got, err := c.FetchMany(t.Context(), []string{"a", "gone", "b"}, time.Minute, func(_ context.Context, keys []string) (map[string]string, error) {
		return map[string]string{"a": "v:a", "b": "v:b", "extra": "x"}, nil
	})
	require.NoError(t, err)
	wantAll(t, got, []string{"a", "b"})
	assertNothingStored(t, c, "gone")
	assertNothingStored(t, c, "extra")
}

func testManyNegativeTTL(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithNegativeTTL(time.Minute))
	e := &echo{}
	only := func(ctx context.Context, keys []string) (map[string]string, error) {
		m, err := e.compute(ctx, keys)
		delete(m, "gone")
		return m, err
	}
	for range 2 {
		got, err := c.FetchMany(ctx, []string{"a", "gone"}, time.Minute, only)
		require.NoError(t, err)
		wantAll(t, got, []string{"a"})
	}
	if calls := e.keys(); len(calls) != 1 {
		t.Errorf("compute calls %v; want one: the tombstone answers the second", calls)
	}
	if _, err := c.Get(ctx, "gone"); !errors.Is(err, dogpile.ErrNotFound) {
		t.Errorf("Get(gone) = %v; want ErrNotFound (a tombstone)", err)
	}
}

// testManyComputeError: compute's error fails its keys only; hits are
// returned, each failed key is named, and a process waiting for one of
// them gets ErrComputeFailed.
func testManyComputeError(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	other := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	require.NoError(t, c.Set(ctx, "hit", "v:hit", time.Minute))
	errDB := errors.New("db down")
	started, release := make(chan struct{}), make(chan struct{})
	res := make(chan error, 1)
	go func() {
		got, err := c.FetchMany(ctx, []string{"hit", "x", "y"}, time.Minute, func(context.Context, []string) (map[string]string, error) {
			close(started)
			<-release
			return nil, errDB
		})
		if got["hit"] != "v:hit" || len(got) != 1 {
			t.Errorf("FetchMany = %v; want the hit only", got)
		}
		res <- err
	}()
	<-started
	hook, waiting := waitSignal()
	dogpile.OnWait(other, hook)
	wres := make(chan error, 1)
	go func() { _, err := other.Fetch(ctx, "x", time.Minute, redistest.NoCompute[string]); wres <- err }()
	<-waiting
	close(release)
	err := <-res
	if !errors.Is(err, errDB) || !strings.Contains(err.Error(), `"x"`) || !strings.Contains(err.Error(), `"y"`) {
		t.Errorf("FetchMany error = %v; want errDB for x and for y, naming them", err)
	}
	if err := <-wres; !errors.Is(err, dogpile.ErrComputeFailed) {
		t.Errorf("waiter Fetch = %v; want ErrComputeFailed", err)
	}
	assertNothingStored(t, c, "x")
	assertNothingStored(t, c, "y")
}

// testManyAcrossInstances: 4 Caches (each its own client, a process each)
// × 8 goroutines FetchMany overlapping sets of 200 keys: each key computed
// once in all. On miniredis, which runs each script in an interpreter
// written in Go (slow under the race detector beside other tests: a
// pipeline of 120 stores outlasted the 3 s a store may take), 50 keys.
func testManyAcrossInstances(t *testing.T, b redistest.Backend) {
	rdb := b.Client(t)
	counter := t.Name() + ":computes" // see computesPerKey
	var wg sync.WaitGroup
	n := 200
	if b.Name == "miniredis" {
		n = 50
	}
	keys := keyRange("k", n)
	for p := range 4 {
		c := dogpile.New[string](b.Client(t), prefix(t))
		for g := range 8 {
			// Each goroutine asks for a window of 60 % of the keys
			// starting at a different place, wrapping around: every pair
			// overlaps.
			from := (p*8 + g) * n / 32
			mine := append(slices.Clone(keys[from:]), keys[:from]...)[:n*3/5]
			e := &echo{counter: func(ctx context.Context, k string) { rdb.HIncrBy(ctx, counter, k, 1) }}
			wg.Go(func() {
				got, err := c.FetchMany(t.Context(), mine, time.Minute, e.compute)
				assert.NoError(t, err)
				wantAll(t, got, mine)
			})
		}
	}
	wg.Wait()
	computedOnce(t, computesPerKey(t, rdb, t.Name()+":"), len(keys))
}

// TestFetchManyRedisDown: with Redis unreachable FetchMany returns an
// error per key and does not compute, unless WithComputeWhenDown is set.
func TestFetchManyRedisDown(t *testing.T) {
	s := redistest.StartServer(t)
	s.Kill()
	c := dogpile.New[string](s.NoRetryClient(t))
	got, err := c.FetchMany(t.Context(), []string{"a", "b"}, time.Minute, redistest.NoComputeMany[string])
	if len(got) != 0 || err == nil || !strings.Contains(err.Error(), `dogpile: get "a"`) || !strings.Contains(err.Error(), `dogpile: get "b"`) {
		t.Errorf("FetchMany with Redis down = %v, %v; want nothing and a get error per key", got, err)
	}
	open := dogpile.New[string](s.NoRetryClient(t), dogpile.WithComputeWhenDown())
	e := &echo{}
	got, err = open.FetchMany(t.Context(), []string{"a", "b"}, time.Minute, e.compute)
	require.NoError(t, err)
	wantAll(t, got, []string{"a", "b"})
	if calls := e.keys(); len(calls) != 1 {
		t.Errorf("compute calls %v; want one, without the cache", calls)
	}
}

// testManyWithFetch: 4 Caches (a process each) × 8 goroutines, half
// calling FetchMany on windows of 60 of 100 keys, half Fetch on each key
// of a window in turn, all at once: each key is computed once in all.
func testManyWithFetch(t *testing.T, b redistest.Backend) {
	rdb := b.Client(t)
	count := func(ctx context.Context, k string) { rdb.HIncrBy(ctx, t.Name()+":computes", k, 1) }
	keys := keyRange("k", 100)
	var wg sync.WaitGroup
	for p := range 4 {
		c := dogpile.New[string](b.Client(t), prefix(t))
		for g := range 8 {
			from := (p*8 + g) * 100 / 32
			mine := append(slices.Clone(keys[from:]), keys[:from]...)[:60]
			e := &echo{counter: count}
			wg.Go(func() {
				if g%2 == 0 {
					got, err := c.FetchMany(t.Context(), mine, time.Minute, e.compute)
					assert.NoError(t, err)
					wantAll(t, got, mine)
					return
				}
				for _, k := range mine {
					v, err := c.Fetch(t.Context(), k, time.Minute, func(ctx context.Context) (string, error) {
						m, err := e.compute(ctx, []string{k}) // FetchMany's compute of k alone
						return m[k], err
					})
					if assert.NoError(t, err, "Fetch(%s) = %q, %v", k, v, err) {
						assert.Equal(t, "v:"+k, v, "Fetch(%s) = %q, %v", k, v, err)
					}
				}
			})
		}
	}
	wg.Wait()
	computedOnce(t, computesPerKey(t, rdb, t.Name()+":"), len(keys))
}

// computedOnce checks that counts (computes per key, from Redis) has n
// keys, each computed once.
func computedOnce(t *testing.T, counts map[string]string, n int) {
	t.Helper()
	for k, c := range counts {
		if c != "1" {
			t.Errorf("key %s computed %s times; want 1", k, c)
		}
	}
	if len(counts) != n {
		t.Errorf("%d keys computed; want %d", len(counts), n)
	}
}

// computesPerKey reads the hash of computes per key under prefix.
func computesPerKey(t *testing.T, rdb redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), prefix+"computes").Result()
	require.NoError(t, err)
	return m
}
