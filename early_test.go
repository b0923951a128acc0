package dogpile

// WithEarlyRefresh: a hot key is refreshed shortly before it expires, so
// that no caller waits for a compute.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// testEarlyRefreshBeforeExpiry, a case of the behaviour suite
// (fetch_test.go): a hit inside the gap before expiry refreshes in the
// background, a hit just before it does not.
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
	if err != nil || m.Took < took || m.Early < min(earlyFloor*m.Took, ttl/3) || m.Early > ttl/3 {
		t.Fatalf("entry meta = %+v, %v; want took >= %v and early in [2·took, ttl/3]", m, err, took)
	}
	// Just before the gap a hit serves and refreshes nothing; inside it, a
	// hit serves the current value and refreshes in the background. The
	// key's own PTTL says where the gap is, whatever time the fill took.
	pass(b, c.client.PTTL(ctx, vk).Val()-m.Early-margin)
	if v, _ := c.Fetch(ctx, "k", ttl, compute); v != "v1" {
		t.Fatalf("hit before the gap = %q; want v1", v)
	}
	settle(t, c)
	if n.Load() != 1 {
		t.Fatalf("%d computes after a hit %v before the gap; want no refresh", n.Load(), margin)
	}
	pass(b, c.client.PTTL(ctx, vk).Val()-m.Early/2)
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
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
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

// TestEarlyGapFloor: the early-refresh gap is never below twice the last
// refresh's duration (times beta), unless capped at a third of the TTL.
func TestEarlyGapFloor(t *testing.T) {
	c := New[string](nopClient(t), WithEarlyRefresh(1.5))
	const took = 10 * time.Millisecond
	for range 1000 {
		if gap := c.earlyGap(took, time.Hour); gap < 30*time.Millisecond {
			t.Fatalf("earlyGap(%v) = %v; want at least 2 × took × beta = 30ms", took, gap)
		}
		if gap := c.earlyGap(took, 60*time.Millisecond); gap != 20*time.Millisecond {
			t.Fatalf("earlyGap(%v, ttl 60ms) = %v; want the cap, a third of the TTL", took, gap)
		}
	}
}
