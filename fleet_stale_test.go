package dogpile_test

// Stale values, negative caching, Refresh and early refresh across
// processes: the test binary re-executed as children (see fleet_test.go
// and fleet_stale_modes_test.go), each with its own client and Cache, on a
// real redis-server and a real 3-master cluster. Computes are counted in
// Redis, so that the counts of every process add up.

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// seed stores v under "k" for ttl with a stale window, as a process of the
// fleet would, and returns the parent's Cache and the moment before the
// store: the value stays in Redis at least until then + ttl + stale.
func seed(t *testing.T, rdb redis.UniversalClient, prefix, v string, ttl, stale time.Duration) (*dogpile.Cache[string], time.Time) {
	t.Helper()
	c := dogpile.New[string](rdb, dogpile.WithPrefix(prefix), dogpile.WithStale(stale))
	t0 := time.Now()
	if err := c.Set(context.Background(), "k", v, ttl); err != nil {
		t.Fatal(err)
	}
	return c, t0
}

// seedStale seeds v1 and waits until it is past its TTL (by Redis's clock),
// stale for a minute.
func seedStale(t *testing.T, rdb redis.UniversalClient, prefix string) *dogpile.Cache[string] {
	t.Helper()
	c, _ := seed(t, rdb, prefix, "v1", 20*time.Millisecond, time.Minute)
	redistest.Eventually(t, "v1 past its TTL by Redis's clock", func() bool {
		pttl, err := rdb.PTTL(context.Background(), dogpile.KeysOf(c, "k").Value).Result()
		return err == nil && pttl <= time.Minute
	})
	return c
}

// TestProcsStaleOneRefresh: 4 processes × 50 goroutines fetch a stale
// value: every call is answered with it at once (a hit, no wait), while one
// refresh runs in the whole fleet; its value is stored.
func TestProcsStaleOneRefresh(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "sb:"
		c := seedStale(t, rdb, prefix)
		kids := goChildren(t, 4, "burst", addrs, prefix, withOpts("stale=1m"))
		// The refresh computes until every call was answered: an answer
		// that waited for it would be v2.
		for _, k := range kids {
			k.Expect(t, "served")
		}
		if err := rdb.Set(context.Background(), prefix+"release", 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		var refreshes uint64
		for i, r := range results(t, kids) {
			if s := r.Stats; r.Values != 50 || s.Stale != 50 || s.Misses != 0 || s.Waits != 0 {
				t.Errorf("child %d: %d answers v1, Stats %+v; want 50 stale hits, no miss, no wait", i, r.Values, s)
			}
			refreshes += r.Stats.Refreshes
		}
		if n := counter(t, rdb, prefix+"computes"); n != 1 || refreshes != 1 {
			t.Errorf("computes = %d, Stats.Refreshes = %d in all; want one refresh in the fleet", n, refreshes)
		}
		if v, err := c.Get(context.Background(), "k"); v != "v2" || err != nil {
			t.Errorf("Get after the refresh = %q, %v; want v2", v, err)
		}
	})
}

// TestProcsStaleRefreshFails: every refresh fails; 3 processes × 4
// goroutines keep fetching. The stale value is served until TTL + stale
// (no call fails before), the backend is asked at most once a second
// across the fleet meanwhile, and then the callers get a miss (an error).
func TestProcsStaleRefreshFails(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "rf:"
		const ttl, window = 200 * time.Millisecond, 3 * time.Second
		kids := readyChildren(t, 3, "failing", addrs, prefix, withOpts("stale=3s"), withWorkers(4))
		_, t0 := seed(t, rdb, prefix, "v1", ttl, window)
		letGo(t, kids)
		// A call that returned before the value could expire read it.
		gone := t0.Add(ttl + window).UnixMilli()
		for i, r := range results(t, kids) {
			if r.Values == 0 || r.Misses != 4 {
				t.Errorf("child %d: %d stale answers, %d loops ended on a miss; want some, and 4", i, r.Values, r.Misses)
			}
			if r.FirstErr < gone {
				t.Errorf("child %d: a Fetch failed %dms before the stale value could expire; want it served", i, gone-r.FirstErr)
			}
		}
		var starts []int64
		if err := rdb.LRange(context.Background(), prefix+"refreshes", 0, -1).ScanSlice(&starts); err != nil {
			t.Fatal(err)
		}
		if len(starts) < 2 {
			t.Errorf("%d refresh calls in the stale window; want the failed refresh retried", len(starts))
		}
		// The retry interval (1s) runs from a refresh's failure, after its
		// start; 100ms of slack for the clock's reading in the children.
		for i := 1; i < len(starts); i++ {
			if gap := starts[i] - starts[i-1]; gap < 900 {
				t.Errorf("%d refresh calls; calls %d and %d %dms apart; want at most one a second in the fleet", len(starts), i-1, i, gap)
				break
			}
		}
		if counter(t, rdb, prefix+"misscomputes") == 0 {
			t.Error("no compute after the stale window; want the misses to compute")
		}
	})
}

// TestProcsNegativeCaching: 4 processes × 50 goroutines fetch a key that
// does not exist: one compute, and ErrNotFound for every caller (remote
// waiters too); then 2 more processes get ErrNotFound without computing.
func TestProcsNegativeCaching(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "nc:"
		for round, n := range []int{4, 2} {
			kids := goChildren(t, n, "absent", addrs, prefix, withOpts("neg=1m"))
			for i, r := range results(t, kids) {
				if r.Values != 50 {
					t.Errorf("round %d, child %d: %d ErrNotFound answers; want 50", round, i, r.Values)
				}
			}
			if got := counter(t, rdb, prefix+"computes"); got != 1 {
				t.Errorf("after round %d: computes = %d; want 1 (then remembered)", round, got)
			}
		}
	})
}

// TestProcsRefreshWhileAnotherComputes: while one process computes "k"
// (a Fetch of a missing key, or a Refresh), 2 processes × 50 goroutines
// call Refresh: they wait for that compute and return its value.
func TestProcsRefreshWhileAnotherComputes(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		for _, op := range []string{"fetch", "refresh"} {
			t.Run(op, func(t *testing.T) {
				prefix := "rw" + op + ":"
				c := dogpile.New[string](rdb, dogpile.WithPrefix(prefix))
				if op == "refresh" {
					if err := c.Set(context.Background(), "k", "old", time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				holder := goChildren(t, 1, "hold", addrs, prefix, withOp(op))[0]
				holder.Expect(t, "computing")
				kids := goChildren(t, 2, "refresh", addrs, prefix)
				for _, k := range kids {
					k.Expect(t, "waiting")
				}
				holder.Say(t, "finish")
				for i, r := range results(t, append(kids, holder)) {
					if want := []int{50, 50, 1}[i]; r.Values != want {
						t.Errorf("child %d: %d answers from the one compute; want %d", i, r.Values, want)
					}
				}
				if n := counter(t, rdb, prefix+"computes"); n != 1 {
					t.Errorf("computes = %d; want 1", n)
				}
				if v, err := c.Get(context.Background(), "k"); v != "held" || err != nil {
					t.Errorf("Get = %q, %v; want held", v, err)
				}
			})
		}
	})
}

// WithEarlyRefresh across processes: a hot key is refreshed shortly before
// it expires, so that no caller waits for a compute.

// TestProcsEarlyRefreshNobodyWaits: XFetch with beta 1 on a hot key: 2
// processes × 4 goroutines fetch it every 2ms (about 3,000 calls a second:
// steady, without starving the refresh of CPU) over 21 TTL periods (TTL
// 300ms, compute 30ms). After the first fill no caller misses (so none
// waits for a compute), the key is computed at most 1.5 times per period on
// average, and never twice at once (counted in Redis by the computes
// themselves). A refresh starts about one compute before it must, so a stall
// of a process or of Redis longer than that (each child probes for them; a
// busy 2-core machine has them) may make one late: misses are then logged,
// not failed. On a quiet machine the test fails without that slack (see
// earlyGap); TestEarlyGapFloor checks the slack itself.
func TestProcsEarlyRefreshNobodyWaits(t *testing.T) {
	onFleetsInTurn(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "xf:"
		const ttl, run = xfetchTTL, 6300 * time.Millisecond
		kids := goChildren(t, 2, "xfetch", addrs, prefix, withOpts("beta=1"), withWorkers(4), withRun(run))
		for _, k := range kids {
			k.Expect(t, "filled")
		}
		for _, k := range kids {
			k.Say(t, "go")
		}
		res := results(t, kids)
		calls, stall := 0, time.Duration(0)
		for i, r := range res {
			t.Logf("child %d: %d calls, %d slower than half a compute, slowest %v, longest stall %v, %d refreshes, %d misses",
				i, r.Calls, r.Slow, r.Max, r.Stall, r.Load.Refreshes, r.Load.Misses)
			calls, stall = calls+r.Calls, max(stall, r.Stall)
		}
		for i, r := range res {
			s := r.Load
			switch {
			case s.Misses == 0:
			case stall >= xfetchCompute:
				// The refresh starts about one compute early: a stall of the
				// machine longer than that can make it late. Excused, not
				// hidden: without that slack callers miss on a quiet machine.
				t.Logf("child %d: %d misses (%d waits) excused by a %v stall", i, s.Misses, s.Waits, stall)
			default:
				t.Errorf("child %d: during the load %+v; want no miss (no caller waiting) after the first fill", i, s)
			}
		}
		periods := float64(run / ttl)
		computes := counter(t, rdb, prefix+"computes") - 1 // the first fill
		t.Logf("%.0f calls/s; %.2f computes per TTL period", float64(calls)/run.Seconds(), float64(computes)/periods)
		if float64(computes) > 1.5*periods {
			t.Errorf("%d computes in %.0f TTL periods; want at most 1.5 per period", computes, periods)
		}
		if n := counter(t, rdb, prefix+"overlaps"); n != 0 {
			t.Errorf("%d computes started while another ran; want none", n)
		}
		if rate := float64(calls) / run.Seconds(); rate < 1000 {
			t.Errorf("load was %.0f calls/s; want at least 1000 for the test to mean anything", rate)
		}
	})
}
