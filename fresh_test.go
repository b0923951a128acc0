package dogpile

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The freshness behaviour (stale serving, background and forced refresh,
// negative caching, per-result TTL) runs on every backend. Each Cache made
// on its own client stands for one process.
var freshness = redistest.Suite{
	{Name: "StaleServedWhileOneRefreshes", Test: testStaleServedWhileOneRefreshes},
	{Name: "StaleRefreshFailsThrottled", Test: testStaleRefreshFailsThrottled},
	{Name: "NegativeCaching", Test: testNegativeCaching},
	{Name: "NotFoundWithoutNegativeTTL", Test: testNotFoundWithoutNegativeTTL},
	{Name: "RefreshForces", Test: testRefreshForces},
	{Name: "RefreshJoinsRunningCompute", Test: testRefreshJoinsRunningCompute},
	{Name: "SetTTLFromCompute", Test: testSetTTLFromCompute},
	{Name: "SetTTLZeroStoresNothing", Test: testSetTTLZeroStoresNothing},
	{Name: "EarlyRefreshBeforeExpiry", Test: testEarlyRefreshBeforeExpiry},
}

func TestFresh(t *testing.T) { freshness.RunWithMiniredis(t) }

func testStaleServedWhileOneRefreshes(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := New[string](b.Client(t), prefix(t), WithStale(time.Minute))
	o := New[string](b.Client(t), prefix(t), WithStale(time.Minute))
	if _, err := a.Fetch(ctx, "k", 100*time.Millisecond, constant("v1")); err != nil {
		t.Fatal(err)
	}
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
	for _, c := range []*Cache[string]{a, o, a, o} {
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
	if v, err := o.Fetch(ctx, "k", time.Minute, refresh); v != "v2" || err != nil {
		t.Errorf("Fetch after the refresh = %q, %v; want v2", v, err)
	}
	sa, so := a.Stats(), o.Stats()
	if sa.Stale != 2 || sa.Refreshes+so.Refreshes != 1 {
		t.Errorf("Stats = %+v and %+v; want Stale 2 each, one refresh in all", sa, so)
	}
}

func testStaleRefreshFailsThrottled(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	const retry, stale = 200 * time.Millisecond, 1500 * time.Millisecond
	cs := []*Cache[string]{
		New[string](b.Client(t), prefix(t), WithStale(stale), WithRefreshRetry(retry)),
		New[string](b.Client(t), prefix(t), WithStale(stale), WithRefreshRetry(retry)),
	}
	if _, err := cs[0].Fetch(ctx, "k", 50*time.Millisecond, constant("v1")); err != nil {
		t.Fatal(err)
	}
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

func testNegativeCaching(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := New[string](b.Client(t), prefix(t), WithNegativeTTL(time.Minute), WithLease(time.Minute))
	o := New[string](b.Client(t), prefix(t), WithNegativeTTL(time.Minute), WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, a, o, ctx, "k", func(context.Context) (string, error) {
		return "", fmt.Errorf("no such beer: %w", ErrNotFound)
	})
	close(release)
	for who, ch := range map[string]chan result[string]{"holder": hres, "waiter": wres} {
		if r := <-ch; !errors.Is(r.err, ErrNotFound) || errors.Is(r.err, ErrComputeFailed) {
			t.Errorf("%s: err = %v; want ErrNotFound", who, r.err)
		}
	}
	// Remembered in every process: no compute until the negative TTL ends.
	var computes atomic.Int32
	for _, c := range []*Cache[string]{a, o} {
		_, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (string, error) {
			computes.Add(1)
			return "found", nil
		})
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Fetch of a tombstone: err = %v; want ErrNotFound", err)
		}
		if _, err := c.Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get of a tombstone: err = %v; want ErrNotFound", err)
		}
	}
	if n := computes.Load(); n != 0 {
		t.Errorf("computes while not found is cached = %d; want 0", n)
	}
	pttl, err := a.client.PTTL(ctx, a.keys("k").value).Result()
	if err != nil || pttl <= 0 || pttl > time.Minute {
		t.Errorf("tombstone PTTL = %v, %v; want the negative TTL", pttl, err)
	}
}

func testNotFoundWithoutNegativeTTL(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	o := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, a, o, ctx, "k", func(context.Context) (string, error) {
		return "", ErrNotFound
	})
	close(release)
	if r := <-hres; !errors.Is(r.err, ErrNotFound) {
		t.Errorf("holder: err = %v; want ErrNotFound", r.err)
	}
	if r := <-wres; !errors.Is(r.err, ErrNotFound) || errors.Is(r.err, ErrComputeFailed) {
		t.Errorf("waiter: err = %v; want ErrNotFound, not ErrComputeFailed", r.err)
	}
	if _, err := a.Get(ctx, "k"); !errors.Is(err, ErrMiss) {
		t.Errorf("Get after not found: err = %v; want ErrMiss (nothing stored)", err)
	}
}

func testRefreshForces(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := New[string](b.Client(t), prefix(t))
	if err := c.Set(ctx, "k", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Refresh(ctx, "k", time.Minute, constant("new")); v != "new" || err != nil {
		t.Fatalf("Refresh = %q, %v; want new", v, err)
	}
	if v, err := New[string](b.Client(t), prefix(t)).Get(ctx, "k"); v != "new" || err != nil {
		t.Errorf("Get after Refresh = %q, %v; want new", v, err)
	}
	errDB := errors.New("db down")
	if _, err := c.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) { return "", errDB }); !errors.Is(err, errDB) {
		t.Errorf("failing Refresh: err = %v; want %v", err, errDB)
	}
	if v, _ := c.Get(ctx, "k"); v != "new" {
		t.Errorf("Get after a failed Refresh = %q; want new (kept)", v)
	}
}

func testRefreshJoinsRunningCompute(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	o := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	if err := a.Set(ctx, "k", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	// a's Refresh computes; o's Refresh waits for it instead of computing.
	release, computing := make(chan struct{}), make(chan struct{})
	done := make(chan result[string], 1)
	go func() {
		v, err := a.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
			close(computing)
			<-release
			return "new", nil
		})
		done <- result[string]{v, err}
	}()
	<-computing
	hook, waiting := waitSignal()
	o.onWait = hook
	got := make(chan result[string], 1)
	go func() {
		v, err := o.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
			return "", errors.New("second compute; want it to wait")
		})
		got <- result[string]{v, err}
	}()
	<-waiting
	close(release)
	for _, ch := range []chan result[string]{done, got} {
		if r := <-ch; r.v != "new" || r.err != nil {
			t.Errorf("Refresh = %q, %v; want new from the one compute", r.v, r.err)
		}
	}
}

func testSetTTLFromCompute(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := New[string](b.Client(t), prefix(t))
	_, err := c.Fetch(ctx, "k", time.Hour, func(ctx context.Context) (string, error) {
		SetTTL(ctx, 5*time.Second) // e.g. Cache-Control: max-age=5
		return "v", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pttl, err := c.client.PTTL(ctx, c.keys("k").value).Result()
	if err != nil || pttl <= 0 || pttl > 5*time.Second {
		t.Errorf("PTTL = %v, %v; want at most the 5s compute set", pttl, err)
	}
}

func testSetTTLZeroStoresNothing(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	o := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, a, o, ctx, "k", func(ctx context.Context) (string, error) {
		SetTTL(ctx, 0) // e.g. Cache-Control: max-age=0
		return "partial", nil
	})
	close(release)
	for who, ch := range map[string]chan result[string]{"holder": hres, "waiter": wres} {
		if r := <-ch; r.v != "partial" || r.err != nil {
			t.Errorf("%s = %q, %v; want the value, handed over though not stored", who, r.v, r.err)
		}
	}
	if _, err := a.Get(ctx, "k"); !errors.Is(err, ErrMiss) {
		t.Errorf("Get: err = %v; want ErrMiss (not stored)", err)
	}
}

func testEarlyRefreshBeforeExpiry(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	// The gap (early) is at least took; the margins below stay clear of
	// its edges by more than a loaded machine oversleeps.
	const took, ttl, margin = 150 * time.Millisecond, 1500 * time.Millisecond, 150 * time.Millisecond
	c := New[string](b.Client(t), prefix(t), WithEarlyRefresh(1))
	var n atomic.Int32
	compute := func(context.Context) (string, error) {
		time.Sleep(took)
		return fmt.Sprint("v", n.Add(1)), nil
	}
	if _, err := c.Fetch(ctx, "k", ttl, compute); err != nil {
		t.Fatal(err)
	}
	vk := c.keys("k").value
	raw, err := c.client.Get(ctx, vk).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	_, m, err := c.decodeEntry(raw)
	if err != nil || m.took < took || m.early < min(earlyFloor*m.took, ttl/3) || m.early > ttl/3 {
		t.Fatalf("entry meta = %+v, %v; want took >= %v and early in [2·took, ttl/3]", m, err, took)
	}
	// Just before the gap a hit serves and refreshes nothing; inside it, a
	// hit serves the current value and refreshes in the background. The
	// key's own PTTL says where the gap is, whatever time the fill took.
	pass(b, c.client.PTTL(ctx, vk).Val()-m.early-margin)
	if v, _ := c.Fetch(ctx, "k", ttl, compute); v != "v1" {
		t.Fatalf("hit before the gap = %q; want v1", v)
	}
	settle(t, c)
	if n.Load() != 1 {
		t.Fatalf("%d computes after a hit %v before the gap; want no refresh", n.Load(), margin)
	}
	pass(b, c.client.PTTL(ctx, vk).Val()-m.early/2)
	if v, _ := c.Fetch(ctx, "k", ttl, compute); v != "v1" {
		t.Fatalf("hit inside the gap = %q; want v1 while refreshing", v)
	}
	settle(t, c)
	if v, err := c.Get(ctx, "k"); v != "v2" || err != nil {
		t.Errorf("after the early refresh Get = %q, %v; want v2", v, err)
	}
	if s := c.Stats(); s.Refreshes != 1 || s.Misses != 1 {
		t.Errorf("Stats = %+v; want one refresh and only the first fill missed", s)
	}
}

// TestFlightNamesDoNotCollide: keys come from data, so no key may join a
// flight of another kind: a Fetch of a key spelled like a name a Refresh
// once used for its flight computes its own value.
func TestFlightNamesDoNotCollide(t *testing.T) {
	c := New[string](redistest.StartServer(t).Client(t), prefix(t))
	ctx := t.Context()
	release, computing := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
			close(computing)
			<-release
			return "value of k", nil
		})
		done <- err
	}()
	<-computing
	v, err := c.Fetch(ctx, "\x00refresh:k", time.Minute, constant("its own"))
	close(release)
	if err != nil || v != "its own" {
		t.Errorf("Fetch during Refresh(k) = %q, %v; want its own value", v, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
