package dogpile_test

// Fetch and FetchMany across processes: the test binary re-executed as children (see
// fleet_test.go), each with its own client and Cache.

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestMultiProcessStampede: 4 processes × 50 goroutines fetch one absent
// key whose compute takes 100 ms: exactly one compute in the fleet.
func TestMultiProcessStampede(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		res := runChildren(t, 4, "one", addrs, "mp:")
		for i, r := range res {
			if r.Values != 50 || len(r.Errors) > 0 {
				t.Errorf("child %d: %d good values, errors %q; want 50, none", i, r.Values, r.Errors)
			}
		}
		if got := computesPerKey(t, rdb, "mp:"); len(got) != 1 || got["k"] != "1" {
			t.Errorf("computes = %v; want exactly one (k: 1)", got)
		}
		var poll uint64
		for _, r := range res {
			poll += r.Stats.PollWakeups
		}
		if poll != 0 {
			t.Errorf("PollWakeups = %d; want every waiting process woken by push", poll)
		}
	})
}

// TestMultiProcessManyKeys: 4 processes × 50 goroutines fetch random keys
// of 1000: each distinct key is computed exactly once in the fleet.
func TestMultiProcessManyKeys(t *testing.T) {
	addrs, rdb := fleetBackend(t, "redis")
	res := runChildren(t, 4, "many", addrs, "mk:")
	distinct := map[string]bool{}
	var computes uint64
	for i, r := range res {
		if len(r.Errors) > 0 {
			t.Errorf("child %d: errors %q", i, r.Errors)
		}
		for _, k := range r.Keys {
			distinct[strconv.Itoa(k)] = true
		}
		computes += r.Stats.Computes
	}
	got := computesPerKey(t, rdb, "mk:")
	for k, n := range got {
		if n != "1" {
			t.Errorf("key %s computed %s times; want 1", k, n)
		}
	}
	if len(got) != len(distinct) || computes != uint64(len(distinct)) {
		t.Errorf("computed keys = %d, Stats.Computes = %d; want both = %d distinct keys fetched", len(got), computes, len(distinct))
	}
}

// killHolder waits until holder computes, starts the waiters with start,
// SIGKILLs holder once each of them waits for it, and returns the waiters'
// results and how many takeovers they made in all.
func killHolder(t *testing.T, holder *child, start func() []*child) ([]fleetResult, uint64) {
	t.Helper()
	holder.Expect(t, "computing")
	kids := start()
	for _, k := range kids {
		k.Expect(t, "waiting")
	}
	holder.Kill()
	results := collect(t, kids)
	var takeovers uint64
	for _, r := range results {
		takeovers += r.Stats.Takeovers
	}
	return results, takeovers
}

// TestMultiProcessHolderKilled: the computing process is SIGKILLed mid
// compute; every other caller still gets the value, after one takeover.
func TestMultiProcessHolderKilled(t *testing.T) {
	addrs, rdb := fleetBackend(t, "redis")
	const prefix = "hk:"
	lease := withOpts("lease=500ms")
	holder := startChild(t, "holder", addrs, prefix, lease, withWorkers(5))
	results, takeovers := killHolder(t, holder, func() []*child { return goChildren(t, 3, "one", addrs, prefix, lease) })
	for i, r := range results {
		if r.Values != 50 || len(r.Errors) > 0 {
			t.Errorf("child %d: %d good values, errors %q; want 50, none", i, r.Values, r.Errors)
		}
	}
	if got := computesPerKey(t, rdb, prefix); got["k"] != "2" {
		t.Errorf("computes = %v; want k: 2 (the killed holder and one takeover)", got)
	}
	if takeovers != 1 {
		t.Errorf("Takeovers = %d; want 1", takeovers)
	}
}

// TestMultiProcessFetchMany: 4 processes × 8 goroutines FetchMany
// overlapping windows of 120 of 200 keys (spread over every slot on a
// cluster): each key is computed exactly once in the fleet, and every
// caller gets every value.
func TestMultiProcessFetchMany(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "mpm:"
		for i, r := range runChildren(t, 4, "batch", addrs, prefix, withWorkers(8)) {
			if r.Values != 8*120 || len(r.Errors) > 0 {
				t.Errorf("child %d: %d good values, errors %q; want %d, none", i, r.Values, r.Errors, 8*120)
			}
		}
		computedOnce(t, computesPerKey(t, rdb, prefix), 200)
	})
}

// TestMultiProcessFetchManyHolderKilled: the process computing all 200
// keys in one FetchMany is SIGKILLed; the other processes take every key
// over (after one lease) and each key is computed twice in all: by the
// dead process and by one taker.
func TestMultiProcessFetchManyHolderKilled(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "mhk:"
		// Each taker computes its keys alone, each with its own renewal:
		// with 3 processes taking over 200 keys at once under -race on a
		// loaded machine, a 500 ms lease was lost now and then (a key
		// then computed by a second taker).
		lease := withOpts("lease=2s")
		holder := startChild(t, "batchholder", addrs, prefix, lease)
		results, takeovers := killHolder(t, holder, func() []*child {
			return goChildren(t, 3, "batch", addrs, prefix, lease, withWorkers(8))
		})
		for i, r := range results {
			if r.Values != 8*120 || len(r.Errors) > 0 {
				t.Errorf("child %d: %d good values, errors %q; want %d, none", i, r.Values, r.Errors, 8*120)
			}
		}
		got := computesPerKey(t, rdb, prefix)
		for i := range 200 {
			if n := got[strconv.Itoa(i)]; n != "2" {
				t.Errorf("key %d computed %s times; want 2 (the killed holder and one taker)", i, n)
			}
		}
		if takeovers != 200 {
			t.Errorf("Takeovers = %d; want 200", takeovers)
		}
	})
}
