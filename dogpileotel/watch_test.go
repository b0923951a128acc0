package dogpileotel_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/dogpileotel"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// watching returns an Observer with opts on a manual reader.
func watching(t *testing.T, opts ...dogpileotel.Option) (*dogpileotel.Observer, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = meters.Shutdown(context.Background()) })
	return dogpileotel.New(append(opts, dogpileotel.WithMeterProvider(meters))...), reader
}

// gauges collects reader's metrics and returns the points of name, by
// their attributes (see collect).
func gauges(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for k, v := range collect(rm) {
		if attrs, ok := strings.CutPrefix(k, name+"{"); ok {
			got["{"+attrs] = v
		}
	}
	return got
}

// miss reads key from c n times, a miss each time: exact counts (a hit
// counts in HotKeys one time in 64).
func miss[T any](t *testing.T, c *dogpile.Cache[T], key string, n int) {
	t.Helper()
	for range n {
		if _, err := c.Get(t.Context(), key); !errors.Is(err, dogpile.ErrMiss) {
			t.Fatalf("Get(%q) = %v; want ErrMiss", key, err)
		}
	}
}

// TestWatchHotKeys: the gauge reports the n most read keys of each watched
// Cache, whatever its value type, labelled with prefix and key; a key that
// leaves the top n leaves the export, so each collection has at most n
// series per prefix. WithHotKeys(0) reports none.
func TestWatchHotKeys(t *testing.T) {
	t.Parallel()
	obs, reader := watching(t, dogpileotel.WithHotKeys(2))
	rdb := redistest.Start(t)
	users := dogpile.New[string](rdb, dogpile.WithPrefix(t.Name()+":users:"))
	beers := dogpile.New[float64](rdb, dogpile.WithPrefix(t.Name()+":beers:"))
	stop := obs.Watch(users, beers)
	defer stop()
	miss(t, users, "a", 3)
	miss(t, users, "b", 2)
	miss(t, users, "c", 1)
	miss(t, beers, "x", 1)
	u := func(key string) string { return "{key=" + key + ",key_prefix=" + users.Prefix() + "}" }
	b := func(key string) string { return "{key=" + key + ",key_prefix=" + beers.Prefix() + "}" }
	want := map[string]int64{u("a"): 3, u("b"): 2, b("x"): 1}
	if got := gauges(t, reader, "dogpile.cache.hot_key.reads"); !maps.Equal(got, want) {
		t.Errorf("hot_key.reads = %v; want %v", got, want)
	}
	miss(t, users, "c", 5) // c overtakes a and b
	want = map[string]int64{u("c"): 6, u("a"): 3, b("x"): 1}
	if got := gauges(t, reader, "dogpile.cache.hot_key.reads"); !maps.Equal(got, want) {
		t.Errorf("hot_key.reads after c's reads = %v; want %v", got, want)
	}

	none, reader0 := watching(t, dogpileotel.WithHotKeys(0))
	defer none.Watch(users)()
	if got := gauges(t, reader0, "dogpile.cache.hot_key.reads"); len(got) != 0 {
		t.Errorf("hot_key.reads with WithHotKeys(0) = %v; want none", got)
	}
}

// TestWatchSumsSharedPrefix: Caches of one prefix are one series set: their
// keys' reads are summed, and the sum's top n reported.
func TestWatchSumsSharedPrefix(t *testing.T) {
	t.Parallel()
	obs, reader := watching(t, dogpileotel.WithHotKeys(2))
	rdb := redistest.Start(t)
	c1 := dogpile.New[string](rdb, dogpile.WithPrefix("users:"))
	c2 := dogpile.New[int](rdb, dogpile.WithPrefix("users:"))
	defer obs.Watch(c1, c2)()
	miss(t, c1, "a", 3)
	miss(t, c1, "b", 1)
	miss(t, c2, "b", 3)
	miss(t, c2, "c", 2)
	want := map[string]int64{"{key=b,key_prefix=users:}": 4, "{key=a,key_prefix=users:}": 3}
	if got := gauges(t, reader, "dogpile.cache.hot_key.reads"); !maps.Equal(got, want) {
		t.Errorf("hot_key.reads = %v; want %v", got, want)
	}
}

// TestWatchSumsBelowEachTop: a key second in each of two Caches of one
// prefix can lead their sum; each gives more than its own top n for it.
func TestWatchSumsBelowEachTop(t *testing.T) {
	t.Parallel()
	obs, reader := watching(t, dogpileotel.WithHotKeys(1))
	rdb := redistest.Start(t)
	c1 := dogpile.New[string](rdb, dogpile.WithPrefix("users:"))
	c2 := dogpile.New[string](rdb, dogpile.WithPrefix("users:"))
	defer obs.Watch(c1, c2)()
	miss(t, c1, "a", 3)
	miss(t, c1, "b", 2)
	miss(t, c2, "c", 3)
	miss(t, c2, "b", 2)
	want := map[string]int64{"{key=b,key_prefix=users:}": 4}
	if got := gauges(t, reader, "dogpile.cache.hot_key.reads"); !maps.Equal(got, want) {
		t.Errorf("hot_key.reads = %v; want %v (b: 2 + 2, second in each Cache)", got, want)
	}
}

// TestWatchHideKeys: a Cache watched through dogpile.HideKeys labels its
// hot keys by rank, and its key names reach no attribute.
func TestWatchHideKeys(t *testing.T) {
	t.Parallel()
	obs, reader := watching(t)
	sessions := dogpile.New[string](redistest.Start(t), dogpile.WithPrefix("sessions:"))
	defer obs.Watch(dogpile.HideKeys(sessions))()
	miss(t, sessions, "token-1f9a", 2)
	miss(t, sessions, "token-77c2", 1)
	want := map[string]int64{"{key=#1,key_prefix=sessions:}": 2, "{key=#2,key_prefix=sessions:}": 1}
	if got := gauges(t, reader, "dogpile.cache.hot_key.reads"); !maps.Equal(got, want) {
		t.Errorf("hot_key.reads = %v; want %v", got, want)
	}
}

// TestWatchStop: once stopped, a watch reports nothing more.
func TestWatchStop(t *testing.T) {
	t.Parallel()
	obs, reader := watching(t)
	c := dogpile.New[string](redistest.Start(t), dogpile.WithPrefix("users:"))
	stop := obs.Watch(c)
	miss(t, c, "a", 1)
	if got := gauges(t, reader, "dogpile.cache.check.sampled"); len(got) != 2 {
		t.Fatalf("check.sampled while watched = %v; want check=near and check=source", got)
	}
	want := map[string]int64{"{key=a,key_prefix=users:}": 1}
	if got := gauges(t, reader, "dogpile.cache.hot_key.reads"); !maps.Equal(got, want) {
		t.Fatalf("hot_key.reads while watched = %v; want %v", got, want)
	}
	stop()
	for _, name := range []string{"dogpile.cache.hot_key.reads", "dogpile.cache.check.sampled"} {
		if got := gauges(t, reader, name); len(got) != 0 {
			t.Errorf("%s after stop = %v; want none", name, got)
		}
	}
}

// TestWatchSourceCheck: the hits WithSourceCheck checks are counted as
// sampled, those that disagree with the source as inconsistent (check=
// source); nothing is sampled for the near tier, which this Cache lacks.
// The check waits a second after the hit, and once more on a mismatch.
func TestWatchSourceCheck(t *testing.T) {
	t.Parallel()
	obs, reader := watching(t)
	moved := func(context.Context, string) (string, error) { return "v2", nil } // nobody deleted v1
	c := dogpile.New[string](redistest.Start(t), dogpile.WithPrefix("users:"), dogpile.WithSourceCheck(1, moved))
	defer c.Close()
	defer obs.Watch(c)()
	for range 2 { // a miss, then a hit that is checked
		if _, err := c.Fetch(t.Context(), "42", time.Minute, func(context.Context) (string, error) { return "v1", nil }); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, "the hit to be found inconsistent", func() bool { return c.Stats().SourceInconsistent == 1 })
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got, want := collect(rm), map[string]int64{
		"dogpile.cache.check.sampled{check=source,key_prefix=users:}":      1,
		"dogpile.cache.check.inconsistent{check=source,key_prefix=users:}": 1,
		"dogpile.cache.check.sampled{check=near,key_prefix=users:}":        0,
		"dogpile.cache.check.inconsistent{check=near,key_prefix=users:}":   0,
	}
	for name, n := range want {
		if v, ok := got[name]; !ok || v != n {
			t.Errorf("%s = %d (reported: %v); want %d (all: %v)", name, v, ok, n, slices.Sorted(maps.Keys(got)))
		}
	}
}

// TestWatchPanicsOnNilCache: a nil Cache is a programmer error, found when
// it is watched.
func TestWatchPanicsOnNilCache(t *testing.T) {
	t.Parallel()
	obs, _ := watching(t)
	defer func() {
		if recover() == nil {
			t.Error("Watch((*Cache[int])(nil)) did not panic")
		}
	}()
	obs.Watch((*dogpile.Cache[int])(nil))
}
