package dogpile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// inconsistencies records the keys of EventInconsistent, with Near.
type inconsistencies struct {
	mu   sync.Mutex
	keys []string
}

func (r *inconsistencies) observe(_ context.Context, e dogpile.Event) context.Context {
	if e.Kind == dogpile.EventInconsistent {
		r.mu.Lock()
		r.keys = append(r.keys, fmt.Sprintf("%s near=%v", e.Key, e.Near))
		r.mu.Unlock()
	}
	return nil
}

func (r *inconsistencies) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.keys)
}

// settleChecks waits until c has ended every check it took.
func settleChecks[T any](t *testing.T, c *dogpile.Cache[T]) {
	t.Helper()
	redistest.Eventually(t, "the checks of sampled hits to end", func() bool { return dogpile.ChecksOpen(c) == 0 })
}

// TestConsistencySamplingCountsSwapDB: SWAPDB changes every key of the
// database without an invalidation, so the near tier keeps serving a value
// Redis no longer holds. A sampled hit finds it, counts it and reports its
// key, once the tier's bound has passed.
func TestConsistencySamplingCountsSwapDB(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t)
	db1 := redis.NewClient(&redis.Options{Addr: s.Addr(), DB: 1})
	t.Cleanup(func() { _ = db1.Close() })
	ctx := t.Context()
	if err := dogpile.New[string](db1, prefix(t)).Set(ctx, "k", "swapped in", time.Minute); err != nil {
		t.Fatal(err)
	}
	var seen inconsistencies
	c := dogpile.NewNearCache[string](t, rdb, 100, dogpile.WithConsistencySampling(1), dogpile.WithObserver(seen.observe))
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, "k", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, c, "k")
	settleChecks(t, c)
	if st := c.Stats(); st.NearSampled == 0 || st.NearInconsistent != 0 {
		t.Fatalf("before SWAPDB: NearSampled, NearInconsistent = %d, %d; want > 0, 0", st.NearSampled, st.NearInconsistent)
	}
	if err := rdb.Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if v := dogpile.FetchNear(t, c, "k"); v != "old" {
		t.Fatalf("near hit after SWAPDB = %q; want the tier's %q (no invalidation)", v, "old")
	}
	settleChecks(t, c)
	if st := c.Stats(); st.NearInconsistent != 1 {
		t.Errorf("NearInconsistent = %d (NearSampled %d); want 1", st.NearInconsistent, st.NearSampled)
	}
	if got, want := seen.String(), "[k near=true]"; got != want {
		t.Errorf("EventInconsistent keys = %s; want %s", got, want)
	}
}

// TestConsistencySamplingCoherentWrites: another client writes the key
// while this process reads it from its near tier, and each invalidation
// is applied late, but within the tier's bound. A check often finds Redis
// ahead of the tier; none is counted inconsistent, as the tier drops the
// value within the bound.
func TestConsistencySamplingCoherentWrites(t *testing.T) {
	s := redistest.StartServer(t)
	ctx := t.Context()
	c := dogpile.NewNearCache[int](t, s.Client(t), 100, dogpile.WithConsistencySampling(1))
	t.Cleanup(func() { _ = c.Close() })
	lag := dogpile.Tracker(c).Config().MaxLag
	dogpile.Tracker(c).BeforeApply = func() { time.Sleep(lag / 10) }
	writer := dogpile.New[int](s.Client(t), prefix(t))
	if err := writer.Set(ctx, "k", 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, c, "k")
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (int, error) { return -1, nil }); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := 1; i <= 20; i++ {
		if err := writer.Set(ctx, "k", i, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lag / 5) // spreads the writes over a few bounds: no timing is asserted
	}
	close(done)
	wg.Wait()
	settleChecks(t, c)
	st := c.Stats()
	if st.NearSampled == 0 || st.NearInconsistent != 0 {
		t.Errorf("NearSampled, NearInconsistent = %d, %d; want > 0, 0", st.NearSampled, st.NearInconsistent)
	}
}

// TestConsistencySamplingRateCap: at a fraction of 1, a near tier that
// answers thousands of hits a second begins at most CheckRate checks a
// second (CheckBurst at once).
func TestConsistencySamplingRateCap(t *testing.T) {
	s := redistest.StartServer(t)
	c := dogpile.NewNearCache[string](t, s.Client(t), 100, dogpile.WithConsistencySampling(1))
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(t.Context(), "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, c, "k")
	settleChecks(t, c)
	checksCapped(t, c, "k", func(st dogpile.Stats) uint64 { return st.NearSampled })
}

// checksCapped fetches key from c for 300 ms, at thousands of hits a
// second, and fails t unless the checks that sampled counts meanwhile are
// at least one and within the rate cap: CheckBurst at once, then
// CheckRate a second.
func checksCapped(t *testing.T, c *dogpile.Cache[string], key string, sampled func(dogpile.Stats) uint64) {
	t.Helper()
	before := c.Stats()
	start := time.Now()
	for time.Since(start) < 300*time.Millisecond { // any length: the bound is checked against it
		dogpile.FetchValue(t, c, key)
	}
	settleChecks(t, c)
	elapsed := time.Since(start)
	st := c.Stats()
	n := sampled(st) - sampled(before)
	if limit := uint64(dogpile.CheckBurst + dogpile.CheckRate*elapsed.Seconds()); n == 0 || n > limit {
		t.Errorf("%d checks of %d hits in %v; want 1 to %d", n, st.Hits-before.Hits, elapsed, limit)
	}
}

// TestConsistencySamplingWithoutNearCache: without a near tier there is
// nothing to check, and no goroutine to start.
func TestConsistencySamplingWithoutNearCache(t *testing.T) {
	rdb := redistest.Start(t)
	before := goleak.IgnoreCurrent()
	c := dogpile.New[string](rdb, prefix(t), dogpile.WithConsistencySampling(1))
	t.Cleanup(func() { _ = c.Close() })
	for range 3 {
		if _, err := c.Fetch(t.Context(), "k", time.Minute, redistest.Constant("v")); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.Hits != 2 || st.NearSampled != 0 || dogpile.ChecksOpen(c) != 0 {
		t.Errorf("Hits, NearSampled, checks open = %d, %d, %d; want 2, 0, 0", st.Hits, st.NearSampled, dogpile.ChecksOpen(c))
	}
	goleak.VerifyNone(t, before) // before Close: no checker was started
}
