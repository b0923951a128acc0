package dogpileotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/dogpileotel"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns an Observer on in-memory providers.
func setup(t *testing.T) (*dogpileotel.Observer, *sdkmetric.ManualReader, *tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		_ = meters.Shutdown(context.Background())
		_ = tracers.Shutdown(context.Background())
	})
	return dogpileotel.New(dogpileotel.WithMeterProvider(meters), dogpileotel.WithTracerProvider(tracers)), reader, spans, tracers
}

// TestCache: a miss computed in one process and awaited in another, then
// a hit: request counts by result, compute and wait histograms labelled
// with the key prefix only, and compute and wait spans under the callers'
// spans, with compute's own span under dogpile.compute.
func TestCache(t *testing.T) {
	obs, reader, spans, tracers := setup(t)
	s := redistest.StartServer(t)
	holder := dogpile.New[int](s.Client(t), dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache))
	waiter := dogpile.New[int](s.Client(t), dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache))
	tracer := tracers.Tracer("test")

	release, computing := make(chan struct{}), make(chan struct{})
	hdone := make(chan error, 1)
	go func() {
		ctx, span := tracer.Start(context.Background(), "holder request")
		_, err := holder.Fetch(ctx, "42", time.Minute, func(ctx context.Context) (int, error) {
			_, db := tracer.Start(ctx, "db query")
			db.End()
			close(computing)
			<-release
			return 1, nil
		})
		span.End() // before the test reads the ended spans
		hdone <- err
	}()
	<-computing
	wdone := make(chan error, 1)
	go func() {
		ctx, span := tracer.Start(context.Background(), "waiter request")
		_, err := waiter.Fetch(ctx, "42", time.Minute, func(context.Context) (int, error) { return 2, nil })
		span.End()
		wdone <- err
	}()
	redistest.Eventually(t, "the waiter to wait", func() bool { return waiter.Stats().Waits > 0 })
	close(release)
	if err := <-hdone; err != nil {
		t.Fatal(err)
	}
	if err := <-wdone; err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Get(context.Background(), "42"); err != nil {
		t.Fatal(err)
	}

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = s
	}
	parent := func(child, want string) {
		t.Helper()
		c, p := byName[child], byName[want]
		if c == nil || p == nil {
			t.Fatalf("spans %v; want %q and %q", names(spans.Ended()), child, want)
		}
		if c.Parent().SpanID() != p.SpanContext().SpanID() {
			t.Errorf("%q's parent is not %q", child, want)
		}
	}
	parent("dogpile.compute", "holder request")
	parent("db query", "dogpile.compute")
	parent("dogpile.wait", "waiter request")
	for _, s := range []string{"dogpile.compute", "dogpile.wait"} {
		for _, kv := range byName[s].Attributes() {
			if kv.Value.Emit() == "42" {
				t.Errorf("span %s carries the key: %v", s, kv)
			}
		}
	}

	wantCounts(t, reader, map[string]int64{
		"dogpile.cache.requests{key_prefix=users:,result=miss}":                                       2,
		"dogpile.cache.requests{key_prefix=users:,result=hit}":                                        1,
		"dogpile.cache.computes{error=false,key_prefix=users:,not_found=false,refresh=false}":         1,
		"dogpile.cache.compute.duration{error=false,key_prefix=users:,not_found=false,refresh=false}": 1,
		"dogpile.cache.wait.duration{key_prefix=users:,wake=push}":                                    1,
	})
}

// TestLock: acquisitions, a busy TryLock and a release are counted by
// primitive, never by name, and the acquire waits recorded.
func TestLock(t *testing.T) {
	obs, reader, _, _ := setup(t)
	rdb := redistest.StartServer(t).Client(t)
	ctx := context.Background()
	m := lock.NewMutex(rdb, "invoice:17", lock.WithObserver(obs.Lock))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.TryLock(ctx); ok {
		t.Fatal("TryLock of a held mutex succeeded")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, reader, map[string]int64{
		"dogpile.lock.events{event=obtained,lock=mutex}":           1,
		"dogpile.lock.events{event=not_obtained,lock=mutex}":       1,
		"dogpile.lock.events{event=released,lock=mutex}":           1,
		"dogpile.lock.acquire.duration{lock=mutex,obtained=true}":  1,
		"dogpile.lock.acquire.duration{lock=mutex,obtained=false}": 1,
	})
}

// wantCounts collects reader's metrics and checks each of want's counts
// (see collect).
func wantCounts(t *testing.T, reader *sdkmetric.ManualReader, want map[string]int64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := collect(rm)
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s = %d; want %d (all: %v)", name, got[name], n, got)
		}
	}
}

// collect flattens metrics to "name{attrs}" → sum (counters), value
// (gauges) or count (histograms).
func collect(rm metricdata.ResourceMetrics) map[string]int64 {
	out := map[string]int64{}
	key := func(name string, set attribute.Set) string {
		s := name + "{"
		for i, kv := range set.ToSlice() {
			if i > 0 {
				s += ","
			}
			s += string(kv.Key) + "=" + kv.Value.Emit()
		}
		return s + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] += int64(p.Count)
				}
			}
		}
	}
	return out
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var ns []string
	for _, s := range spans {
		ns = append(ns, s.Name())
	}
	return ns
}

// TestNearInvalidations: keys the near tier drops are counted, a flush
// of the whole tier apart.
func TestNearInvalidations(t *testing.T) {
	obs, reader, _, _ := setup(t)
	ctx := context.Background()
	obs.Cache(ctx, dogpile.Event{Kind: dogpile.EventInvalidate, Prefix: "users:", Key: "u1"})
	obs.Cache(ctx, dogpile.Event{Kind: dogpile.EventInvalidate, Prefix: "users:", Key: "u2"})
	obs.Cache(ctx, dogpile.Event{Kind: dogpile.EventInvalidate, Prefix: "users:"})
	wantCounts(t, reader, map[string]int64{
		"dogpile.cache.near.invalidations{flush=false,key_prefix=users:}": 2,
		"dogpile.cache.near.invalidations{flush=true,key_prefix=users:}":  1,
	})
}

// TestNearHit: a hit from the near tier is counted with result=near.
func TestNearHit(t *testing.T) {
	obs, reader, _, _ := setup(t)
	ctx := context.Background()
	obs.Cache(ctx, dogpile.Event{Kind: dogpile.EventHit, Prefix: "users:", Near: true})
	obs.Cache(ctx, dogpile.Event{Kind: dogpile.EventHit, Prefix: "users:"})
	wantCounts(t, reader, map[string]int64{
		"dogpile.cache.requests{key_prefix=users:,result=near}": 1,
		"dogpile.cache.requests{key_prefix=users:,result=hit}":  1,
	})
}

// TestNotFound: a compute that finds nothing, and the cached tombstone
// that remembers it, count as "not found", not as a compute error or a
// stale hit (issue 20: error dashboards fired on ordinary 404s).
func TestNotFound(t *testing.T) {
	obs, reader, spans, _ := setup(t)
	rdb := redistest.StartServer(t).Client(t)
	c := dogpile.New[int](rdb, dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache),
		dogpile.WithStale(10*time.Minute), dogpile.WithNegativeTTL(30*time.Second))
	for range 2 {
		if _, err := c.Fetch(context.Background(), "404", time.Minute, func(context.Context) (int, error) {
			return 0, dogpile.ErrNotFound
		}); !errors.Is(err, dogpile.ErrNotFound) {
			t.Fatalf("Fetch = %v; want ErrNotFound", err)
		}
	}
	wantCounts(t, reader, map[string]int64{
		"dogpile.cache.requests{key_prefix=users:,result=notfound}":                                  2,
		"dogpile.cache.computes{error=false,key_prefix=users:,not_found=true,refresh=false}":         1,
		"dogpile.cache.compute.duration{error=false,key_prefix=users:,not_found=true,refresh=false}": 1,
	})
	for _, s := range spans.Ended() {
		if s.Status().Code == codes.Error {
			t.Errorf("span %s has an error status for a not-found", s.Name())
		}
	}
}

// TestTagInvalidations: InvalidateTag is counted per tag, by key prefix
// and the tag's kind (before its first ':'), never by tag (tags come from
// data); WithTagLabel changes the kind.
func TestTagInvalidations(t *testing.T) {
	obs, reader, _, _ := setup(t)
	rdb := redistest.StartServer(t).Client(t)
	c := dogpile.New[int](rdb, dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache))
	if err := c.SetTagged(context.Background(), "42", 1, time.Minute, "team:7"); err != nil {
		t.Fatal(err)
	}
	if err := c.InvalidateTag(context.Background(), "team:7", "team:8", "prices"); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, reader, map[string]int64{
		"dogpile.cache.tag.invalidations{key_prefix=users:,tag_prefix=team}": 2,
		"dogpile.cache.tag.invalidations{key_prefix=users:,tag_prefix=}":     1,
	})

	reader2 := sdkmetric.NewManualReader()
	obs2 := dogpileotel.New(dogpileotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader2))),
		dogpileotel.WithTagLabel(func(tag string) string { return strings.ToUpper(tag[:1]) }))
	c2 := dogpile.New[int](rdb, dogpile.WithPrefix("users:"), dogpile.WithObserver(obs2.Cache))
	if err := c2.InvalidateTag(context.Background(), "team:9"); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, reader2, map[string]int64{"dogpile.cache.tag.invalidations{key_prefix=users:,tag_prefix=T}": 1})
}

// TestCloseIsNoComputeError: a compute that Cache.Close ends is counted
// with error=false, and its span has no error status: a deploy raises no
// compute errors.
func TestCloseIsNoComputeError(t *testing.T) {
	obs, reader, spans, _ := setup(t)
	rdb := redistest.StartServer(t).Client(t)
	c := dogpile.New[int](rdb, dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache))
	computing, done := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := c.Fetch(context.Background(), "42", time.Minute, func(ctx context.Context) (int, error) {
			close(computing)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		done <- err
	}()
	<-computing
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, dogpile.ErrClosed) {
		t.Fatalf("Fetch in flight at Close = %v; want ErrClosed", err)
	}
	wantCounts(t, reader, map[string]int64{
		"dogpile.cache.computes{error=false,key_prefix=users:,not_found=false,refresh=false}": 1,
		"dogpile.cache.computes{error=true,key_prefix=users:,not_found=false,refresh=false}":  0,
	})
	for _, s := range spans.Ended() {
		if s.Status().Code == codes.Error {
			t.Errorf("span %s has an error status for a compute that Close ended", s.Name())
		}
	}
}
