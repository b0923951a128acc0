package dogpile_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// skewed fetches each of keys once, then reads them in turn with weights
// 9:4:2:1 (the first key 9 times in 16, the last once), n reads in all,
// every other one with Get, and returns how many reads each key had.
func skewed(t *testing.T, c *dogpile.Cache[string], keys [4]string, n int) map[string]uint64 {
	t.Helper()
	ctx := t.Context()
	reads := map[string]uint64{}
	for _, k := range keys {
		if _, err := c.Fetch(ctx, k, time.Minute, redistest.Constant("v:"+k)); err != nil {
			t.Fatalf("Fetch(%q): %v", k, err)
		}
		reads[k]++
	}
	pattern := []int{0, 1, 0, 2, 0, 1, 0, 3, 0, 1, 0, 2, 0, 1, 0, 0} // 9, 4, 2, 1
	for i := range n {
		k := keys[pattern[i%len(pattern)]]
		var err error
		if i%2 == 0 {
			_, err = c.Fetch(ctx, k, time.Minute, redistest.Constant("v:"+k))
		} else {
			_, err = c.Get(ctx, k)
		}
		if err != nil {
			t.Fatalf("read %d of %q: %v", i, k, err)
		}
		reads[k]++
	}
	return reads
}

// checkHot checks that the report's first keys are keys, in order, each
// with reads within six samples (64 hits each) of its true count, and at
// least its misses. Over 16×800 reads of skewed's pattern, the sampling is
// off by at most 5.75 samples for any key and orders the keys right,
// whatever count the Cache's hits start from (tried for the first 100,000).
func checkHot(t *testing.T, hot []dogpile.HotKey, keys [4]string, reads map[string]uint64) {
	t.Helper()
	if len(hot) < len(keys) {
		t.Fatalf("HotKeys = %+v; want at least %v", hot, keys)
	}
	const slack = 6 * 64
	for i, k := range keys {
		h := hot[i]
		if h.Key != k {
			t.Fatalf("HotKeys[%d] = %+v; want %q first (%+v)", i, h, k, hot)
		}
		if want := reads[k]; h.Reads+slack < want || h.Reads > want+slack || h.Reads < h.Misses {
			t.Errorf("%s: %d reads (%d misses); want %d±%d", k, h.Reads, h.Misses, want, slack)
		}
	}
}

// testHotKeys: reads skewed over four keys through Fetch and Get come out
// of HotKeys in order with plausible counts; misses, computes (one per key
// of a FetchMany compute) and waits are exact; n ≤ 0 gives nil.
func testHotKeys(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	if hot := c.HotKeys(10); len(hot) != 0 {
		t.Errorf("HotKeys before any read = %+v; want none", hot)
	}
	keys := [4]string{"a", "b", "c", "d"}
	reads := skewed(t, c, keys, 16*800) // 7200, 3200, 1600, 800
	for range 5 {
		if _, err := c.Get(ctx, "absent"); !errors.Is(err, dogpile.ErrMiss) {
			t.Fatalf("Get(absent): %v; want ErrMiss", err)
		}
	}
	if _, err := c.FetchMany(ctx, []string{"m1", "m2"}, time.Minute, func(_ context.Context, ks []string) (map[string]string, error) {
		return map[string]string{"m1": "1", "m2": "2"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// A wait for another process's compute, seen by the waiting process.
	holder := dogpile.New[string](b.Client(t), prefix(t))
	release, hres, wres := holdAndWait(t, holder, c, ctx, "w", redistest.Constant("v"))
	close(release)
	if r, s := <-hres, <-wres; r.err != nil || s.err != nil {
		t.Fatalf("holder: %v; waiter: %v", r.err, s.err)
	}

	hot := c.HotKeys(100)
	checkHot(t, hot, keys, reads)
	byKey := map[string]dogpile.HotKey{}
	for _, h := range hot {
		byKey[h.Key] = h
	}
	for _, want := range []dogpile.HotKey{
		{Key: "a", Misses: 1, Computes: 1}, // each key's first Fetch computed
		{Key: "d", Misses: 1, Computes: 1},
		{Key: "absent", Reads: 5, Misses: 5},
		{Key: "m1", Reads: 1, Misses: 1, Computes: 1},
		{Key: "m2", Reads: 1, Misses: 1, Computes: 1},
		{Key: "w", Reads: 1, Misses: 1, Waits: 1},
	} {
		got := byKey[want.Key]
		if want.Reads == 0 {
			want.Reads = got.Reads // checked by checkHot
		}
		if got != want {
			t.Errorf("%s: %+v; want %+v", want.Key, got, want)
		}
	}
	if got := holder.HotKeys(5); len(got) != 1 || got[0] != (dogpile.HotKey{Key: "w", Reads: 1, Misses: 1, Computes: 1}) {
		t.Errorf("holder's HotKeys = %+v; want w computed once", got)
	}
	if got := c.HotKeys(2); len(got) != 2 || got[0].Key != "a" || got[1].Key != "b" {
		t.Errorf("HotKeys(2) = %+v; want a, b", got)
	}
	for _, n := range []int{0, -1} {
		if got := c.HotKeys(n); got != nil {
			t.Errorf("HotKeys(%d) = %+v; want nil", n, got)
		}
	}
}

// TestHotKeysNearTier: near hits are counted as reads like Redis hits.
func TestHotKeysNearTier(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	c := dogpile.NewNearCache[string](t, rdb, 100)
	keys := [4]string{"a", "b", "c", "d"}
	first := map[string]uint64{} // the reads of FetchNear
	for _, k := range keys {
		if err := c.Set(t.Context(), k, "v:"+k, time.Minute); err != nil {
			t.Fatal(err)
		}
		s := c.Stats()
		dogpile.FetchNear(t, c, k) // reads k until a near hit
		first[k] = c.Stats().Hits + c.Stats().Misses - s.Hits - s.Misses
	}
	near := c.Stats().NearHits
	reads := skewed(t, c, keys, 16*800)
	// Every other read is a Fetch; the tier may be bypassed for a while
	// (its invalidations late on a loaded machine), but not for most.
	if got := c.Stats().NearHits - near; got < 16*200 {
		t.Fatalf("%d near hits of %d Fetches; want most near", got, 16*400)
	}
	for k, n := range first {
		reads[k] += n
	}
	checkHot(t, c.HotKeys(4), keys, reads)
}

// TestHotKeysKeepsCallersKeys: the report names the caller's key, not the
// Redis key, whatever it holds.
func TestHotKeysKeepsCallersKeys(t *testing.T) {
	c := dogpile.New[string](redistest.StartServer(t).Client(t), dogpile.WithPrefix("p:"))
	key := "user:{42}:" + strings.Repeat("x", 3)
	if _, err := c.Fetch(t.Context(), key, time.Minute, redistest.Constant("v")); err != nil {
		t.Fatal(err)
	}
	if got := c.HotKeys(1); len(got) != 1 || got[0].Key != key {
		t.Errorf("HotKeys(1) = %+v; want %q", got, key)
	}
}
