package dogpile_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A refreshing process that dies or freezes mid-refresh, across processes
// (see fleet_stale_test.go). The lease is short so that it runs out soon.
const takeoverLease = 500 * time.Millisecond

var takeoverOpts = withOpts("stale=1m,lease=500ms")

// startRefreshHolder seeds a stale v1 and starts a process whose Fetch is
// answered v1 and whose background refresh computes until told to finish.
// It returns once that process holds the compute lock, with the lock's PTTL.
func startRefreshHolder(t *testing.T, addrs []string, rdb redis.UniversalClient, prefix string) (*dogpile.Cache[string], *child, time.Duration) {
	t.Helper()
	c := seedStale(t, rdb, prefix)
	holder := goChildren(t, 1, "hold", addrs, prefix, takeoverOpts, withOp("stale"))[0]
	holder.Expect(t, "computing")
	pttl, err := rdb.PTTL(context.Background(), dogpile.KeysOf(c, "k").Lock).Result()
	if err != nil || pttl <= 0 || pttl > takeoverLease {
		t.Fatalf("compute lock PTTL = %v, %v; want the holder's lease", pttl, err)
	}
	return c, holder, pttl
}

// checkStaleThenNew checks the results of "until" children: answered the
// stale v1 or the refreshed v2 only, never waiting, and v2 in the end. It
// returns when v2 was first served.
func checkStaleThenNew(t *testing.T, kids []*child) time.Time {
	t.Helper()
	var first int64
	for i, r := range results(t, kids) {
		if s := r.Stats; s.Misses != 0 || s.Waits != 0 || r.FirstNew == 0 {
			t.Errorf("child %d: Stats %+v, refreshed value first served at %d; want no miss, no wait, v2 served", i, s, r.FirstNew)
		}
		if first == 0 || r.FirstNew != 0 && r.FirstNew < first {
			first = r.FirstNew
		}
	}
	return time.UnixMilli(first)
}

// TestProcsRefreshHolderKilled: the process refreshing a stale value is
// SIGKILLed mid-compute. Two other processes keep being served the stale
// value, and one of them refreshes once the dead holder's lease ran out.
func TestProcsRefreshHolderKilled(t *testing.T) {
	onFleetsInTurn(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "rk:"
		c, holder, pttl := startRefreshHolder(t, addrs, rdb, prefix)
		holder.Kill()
		killed := time.Now()
		kids := goChildren(t, 2, "until", addrs, prefix, takeoverOpts, withWorkers(4))
		refreshed := checkStaleThenNew(t, kids)
		// Generous for a loaded machine: without the lease running out, the
		// lock would never be taken again.
		if d := refreshed.Sub(killed); d > pttl+3*time.Second {
			t.Errorf("refreshed %v after the kill; want within the lease (%v left) and some slack", d, pttl)
		}
		if n := counter(t, rdb, prefix+"computes"); n != 2 {
			t.Errorf("computes = %d; want 2 (the killed holder's and one takeover)", n)
		}
		if v, err := c.Get(context.Background(), "k"); v != "v2" || err != nil {
			t.Errorf("Get = %q, %v; want v2", v, err)
		}
	})
}

// TestProcsRefreshZombieFenced: the process refreshing a stale value is
// frozen (SIGSTOP) past its lease; another process refreshes; then the
// frozen one resumes and finishes its compute. Its late value must never
// be stored over the newer one (the fenced store).
func TestProcsRefreshZombieFenced(t *testing.T) {
	onFleetsInTurn(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "rz:"
		c, zombie, _ := startRefreshHolder(t, addrs, rdb, prefix)
		zombie.Pause(t)
		waitGone(t, rdb, dogpile.KeysOf(c, "k").Lock)
		checkStaleThenNew(t, goChildren(t, 1, "until", addrs, prefix, takeoverOpts, withWorkers(4)))

		zombie.Resume(t)
		zombie.Say(t, "finish") // compute returns "held", past its lease
		r := results(t, []*child{zombie})[0]
		if r.Values != 1 || r.Stats.Refreshes != 1 {
			t.Errorf("zombie: %d stale answers, Stats %+v; want its Fetch answered v1 and one refresh", r.Values, r.Stats)
		}
		if v, err := c.Get(context.Background(), "k"); v != "v2" || err != nil {
			t.Errorf("Get after the zombie finished = %q, %v; want v2, not its late value", v, err)
		}
		if n := counter(t, rdb, prefix+"computes"); n != 2 {
			t.Errorf("computes = %d; want 2 (the zombie's and one takeover)", n)
		}
	})
}

// waitGone waits until key no longer exists (a lease ran out).
func waitGone(t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	redistest.Eventually(t, key+" to expire", func() bool {
		n, err := rdb.Exists(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}
