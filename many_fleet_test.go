package dogpile

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
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

// testManyWithFetch: 4 Caches (a process each) × 8 goroutines, half
// calling FetchMany on windows of 60 of 100 keys, half Fetch on each key
// of a window in turn, all at once: each key is computed once in all.
func testManyWithFetch(t *testing.T, b redistest.Backend) {
	rdb := b.Client(t)
	count := func(ctx context.Context, k string) { rdb.HIncrBy(ctx, t.Name()+":computes", k, 1) }
	keys := keyRange("k", 100)
	var wg sync.WaitGroup
	for p := range 4 {
		c := New[string](b.Client(t), prefix(t))
		for g := range 8 {
			from := (p*8 + g) * 100 / 32
			mine := append(slices.Clone(keys[from:]), keys[:from]...)[:60]
			e := &echo{counter: count}
			wg.Go(func() {
				if g%2 == 0 {
					got, err := c.FetchMany(t.Context(), mine, time.Minute, e.compute)
					if err != nil {
						t.Error(err)
					}
					wantAll(t, got, mine)
					return
				}
				for _, k := range mine {
					v, err := c.Fetch(t.Context(), k, time.Minute, one(k, e.compute))
					if err != nil || v != "v:"+k {
						t.Errorf("Fetch(%s) = %q, %v", k, v, err)
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
