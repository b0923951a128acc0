package dogpile_test

import (
	"strconv"
	"testing"
)

// TestMultiProcessFetchMany: 4 processes × 8 goroutines FetchMany
// overlapping windows of 120 of 200 keys (spread over every slot on a
// cluster): each key is computed exactly once in the fleet, and every
// caller gets every value.
func TestMultiProcessFetchMany(t *testing.T) {
	for _, b := range []string{"redis", "cluster"} {
		t.Run(b, func(t *testing.T) {
			addrs, rdb := fleetBackend(t, b)
			const prefix = "mpm:"
			for i, r := range runChildren(t, 4, "batch", addrs, prefix, withWorkers(8)) {
				if r.Values != 8*120 || len(r.Errors) > 0 {
					t.Errorf("child %d: %d good values, errors %q; want %d, none", i, r.Values, r.Errors, 8*120)
				}
			}
			computedOnce(t, computesPerKey(t, rdb, prefix), 200)
		})
	}
}

// TestMultiProcessFetchManyHolderKilled: the process computing all 200
// keys in one FetchMany is SIGKILLed; the other processes take every key
// over (after one lease) and each key is computed twice in all: by the
// dead process and by one taker.
func TestMultiProcessFetchManyHolderKilled(t *testing.T) {
	for _, b := range []string{"redis", "cluster"} {
		t.Run(b, func(t *testing.T) {
			addrs, rdb := fleetBackend(t, b)
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
}
