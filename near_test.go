package dogpile_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// getCalls is how many GETs the server has run (INFO commandstats).
func getCalls(t *testing.T, rdb redis.UniversalClient) int { return commandCalls(t, rdb, "get") }

// commandCalls is how many times the server has run the command called name.
func commandCalls(t *testing.T, rdb redis.UniversalClient, name string) int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+name+":calls="); ok {
			n := 0
			for _, r := range rest {
				if r < '0' || r > '9' {
					break
				}
				n = 10*n + int(r-'0')
			}
			return n
		}
	}
	return 0
}

func TestNearCacheHitsSkipRedis(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	a := dogpile.NewNearCache[string](t, rdb, 100)
	if err := a.Set(t.Context(), "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := dogpile.FetchNear(t, a, "k"); v != "v1" {
		t.Fatalf("near hit = %q; want v1", v)
	}
	gets := getCalls(t, rdb)
	for range 100 {
		if v := dogpile.FetchValue(t, a, "k"); v != "v1" {
			t.Fatalf("Fetch = %q; want v1", v)
		}
	}
	if n := getCalls(t, rdb) - gets; n != 0 {
		t.Errorf("100 near hits ran %d GETs; want 0", n)
	}
	if s := a.Stats(); s.NearHits < 101 || s.Hits < s.NearHits || s.NearOff {
		t.Errorf("Stats = %+v; want ≥ 101 near hits, counted in Hits", s)
	}
}

// TestNearCacheSeesOtherWriters: a value near-cached in one process is
// replaced after another process Sets it, a raw SET writes it, or a raw DEL
// removes it; the delay from the write to the invalidation is logged.
func TestNearCacheSeesOtherWriters(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t)
	a := dogpile.NewNearCache[string](t, rdb, 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	sibling := dogpile.New[string](rdb, prefix(t)) // another Cache of A's process, on A's client (no NOLOOP)
	raw := s.Client(t)
	ctx := t.Context()
	if err := b.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")

	// write stores want in a way; the next Fetch of a must return want.
	invalidations := func() uint64 { return a.Stats().NearInvalidations }
	check := func(how, want string, write func() error) {
		t.Helper()
		count := invalidations
		if how == "FLUSHALL" { // one message for all keys, which go-redis cannot parse: a flush
			count = func() uint64 { return a.Stats().NearFlushes }
		}
		before := count()
		if err := write(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// Wait for the write's own message: a count of invalidations may
		// also move for a message of an earlier write (a script touches
		// more than the value key, all under the prefix).
		redistest.Eventually(t, "the invalidation after "+how, func() bool {
			v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("computed"))
			if err != nil {
				t.Fatalf("after %s: Fetch: %v", how, err)
			}
			return count() > before && v == want
		})
		t.Logf("%s: invalidation applied %v after the write returned (polled every ms; see bench for the real lag)", how, time.Since(start))
		if got := dogpile.FetchNear(t, a, "k"); got != want {
			t.Fatalf("after %s: near hit = %q; want %q", how, got, want)
		}
	}
	check("another process's Set", "v2", func() error { return b.Set(ctx, "k", "v2", time.Minute) })
	check("a Set by another Cache of this process", "v2b", func() error { return sibling.Set(ctx, "k", "v2b", time.Minute) })
	check("a raw SET", "v3", func() error {
		enc, err := dogpile.Encode(b, "v3")
		if err != nil {
			return err
		}
		return raw.Set(ctx, dogpile.KeysOf(b, "k").Value, enc, time.Minute).Err()
	})
	check("a raw DEL", "computed", func() error { return raw.Del(ctx, dogpile.KeysOf(b, "k").Value).Err() })
	check("FLUSHALL", "computed", func() error { return raw.FlushAll(ctx).Err() })
}

// TestNearCacheOwnWritesAtOnce: this Cache's Set, Refresh and Delete drop
// the local copy before they return, without waiting for Redis's message
// (held back here until each check is done).
func TestNearCacheOwnWritesAtOnce(t *testing.T) {
	a := dogpile.NewNearCache[string](t, redistest.StartServer(t).Client(t), 100)
	ctx := t.Context()
	if err := a.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	var held sync.Mutex
	dogpile.Tracker(a).BeforeApply = func() { held.Lock(); held.Unlock() } // waits while the test holds it
	for _, w := range []struct {
		name, want string
		write      func() error
	}{
		{"Set", "v2", func() error { return a.Set(ctx, "k", "v2", time.Minute) }},
		{"Refresh", "v3", func() error { _, err := a.Refresh(ctx, "k", time.Minute, redistest.Constant("v3")); return err }},
		{"Delete", "v4", func() error { return a.Delete(ctx, "k") }},
	} {
		dogpile.FetchNear(t, a, "k")
		held.Lock()
		if err := w.write(); err != nil {
			t.Fatal(err)
		}
		v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("v4"))
		held.Unlock()
		if err != nil || v != w.want {
			t.Fatalf("Fetch after %s = %q, %v; want %q", w.name, v, err, w.want)
		}
	}
}

// TestNearCacheExpire: Expire makes a near-cached value stale in every
// process: the one that expires it drops its copy before Expire returns
// (its invalidation held back here), another once its invalidation
// arrives; each then serves the value as stale while one refreshes it. On
// a server and on a 3-master Cluster.
func TestNearCacheExpire(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartServer(t)
		testNearCacheExpire(t, func() redis.UniversalClient { return s.Client(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		testNearCacheExpire(t, func() redis.UniversalClient { return cl.Client(t) })
	})
}

func testNearCacheExpire(t *testing.T, client func() redis.UniversalClient) {
	a := dogpile.NewNearCache[string](t, client(), 100, dogpile.WithStale(time.Hour))
	o := dogpile.NewNearCache[string](t, client(), 100, dogpile.WithStale(time.Hour))
	ctx := t.Context()
	require.NoError(t, a.Set(ctx, "k", "v1", time.Hour))
	dogpile.FetchNear(t, a, "k")
	dogpile.FetchNear(t, o, "k")
	release := make(chan struct{})
	refresh := func(context.Context) (string, error) { <-release; return "v2", nil }

	var held sync.Mutex
	dogpile.Tracker(a).BeforeApply = func() { held.Lock(); held.Unlock() } // waits while the test holds it
	held.Lock()
	require.NoError(t, a.Expire(ctx, "k"))
	v, err := a.Fetch(ctx, "k", time.Hour, refresh)
	stale := a.Stats().Stale
	held.Unlock()
	if err != nil || v != "v1" || stale != 1 {
		t.Fatalf("Fetch after Expire = %q, %v with %d stale; want v1 served as stale", v, err, stale)
	}
	redistest.Eventually(t, "the other process to serve the value as stale", func() bool {
		before := o.Stats().Stale
		v, err := o.Fetch(ctx, "k", time.Hour, refresh)
		require.NoError(t, err)
		require.Equal(t, "v1", v, "the other process's Fetch while the refresh runs")
		return o.Stats().Stale > before
	})
	close(release)
	for _, c := range []*dogpile.Cache[string]{a, o} {
		redistest.Eventually(t, "the refreshed value", func() bool {
			v, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("unused"))
			return err == nil && v == "v2"
		})
	}
}

// TestNearCacheExpires: a near copy is not served past the key's TTL, nor
// into its stale window; active expiry is off, so no invalidation comes to
// remove it (only the copy's own deadline does).
func TestNearCacheExpires(t *testing.T) {
	rdb := redistest.Start(t, "--enable-debug-command", "local")
	if err := rdb.Do(t.Context(), "DEBUG", "SET-ACTIVE-EXPIRE", "0").Err(); err != nil {
		t.Skipf("DEBUG SET-ACTIVE-EXPIRE: %v", err)
	}
	for _, stale := range []time.Duration{0, time.Minute} {
		t.Run("stale="+stale.String(), func(t *testing.T) {
			var opts []dogpile.Option
			if stale > 0 {
				opts = append(opts, dogpile.WithStale(stale))
			}
			a := dogpile.NewNearCache[string](t, rdb, 100, opts...)
			const ttl = 300 * time.Millisecond
			if err := a.Set(t.Context(), "k", "v1", ttl); err != nil {
				t.Fatal(err)
			}
			set := time.Now()
			dogpile.FetchNear(t, a, "k")
			time.Sleep(time.Until(set.Add(ttl + 50*time.Millisecond)))
			hits := a.Stats().NearHits
			v, err := a.Fetch(t.Context(), "k", time.Minute, redistest.Constant("v2"))
			if err != nil {
				t.Fatal(err)
			}
			if n := a.Stats().NearHits - hits; n != 0 {
				t.Fatalf("near hit past the TTL (got %q)", v)
			}
			want := "v2"
			if stale > 0 {
				want = "v1" // from Redis, stale, refreshed in the background
				if a.Stats().Stale == 0 {
					t.Errorf("the hit past the TTL was not a stale hit")
				}
			}
			if v != want {
				t.Errorf("Fetch past the TTL = %q; want %q", v, want)
			}
			settle(t, a)
		})
	}
}

func TestNearCacheBounded(t *testing.T) {
	a := dogpile.NewNearCache[int](t, redistest.StartServer(t).Client(t), 50)
	ctx := t.Context()
	if err := a.Set(ctx, "warm", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "warm") // tracking is up from here
	for i := range 500 {
		key := "k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		for range 2 {
			if _, err := a.Fetch(ctx, key, time.Minute, func(context.Context) (int, error) { return i, nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := dogpile.NearLen(a); n > 50 || n == 0 {
		t.Errorf("near tier holds %d entries after 500 keys; want 1..50", n)
	}
}

func TestNearCacheOptionPanics(t *testing.T) {
	mustPanic(t, "WithNearCache(0)", func() { dogpile.WithNearCache(0) })
	mustPanic(t, "WithNearCache(-1)", func() { dogpile.WithNearCache(-1) })
}

// TestNearCacheTombstone: a remembered "not found" (WithNegativeTTL) is
// served from the near tier too, reported to the observer as a near hit.
func TestNearCacheTombstone(t *testing.T) {
	var nearEvents atomic.Int64
	observe := func(ctx context.Context, e dogpile.Event) context.Context {
		if e.Kind == dogpile.EventHit && e.Near {
			nearEvents.Add(1)
		}
		return nil
	}
	a := dogpile.NewNearCache[string](t, redistest.StartServer(t).Client(t), 100, dogpile.WithNegativeTTL(time.Minute), dogpile.WithObserver(observe))
	absent := func(context.Context) (string, error) { return "", dogpile.ErrNotFound }
	redistest.Eventually(t, "a near hit on the tombstone", func() bool {
		before := a.Stats().NearHits
		if _, err := a.Fetch(t.Context(), "gone", time.Minute, absent); !errors.Is(err, dogpile.ErrNotFound) {
			t.Fatalf("Fetch = %v; want ErrNotFound", err)
		}
		return a.Stats().NearHits > before
	})
	if s := a.Stats(); s.Computes != 1 || nearEvents.Load() != int64(s.NearHits) {
		t.Errorf("Stats = %+v, near hit events %d; want 1 compute and an event per near hit", s, nearEvents.Load())
	}
}

// TestNearCacheKeepsItsOwnCopy: the caller whose Fetch read a value from
// Redis gets its own copy, as Fetch promises, and may change it; the near
// tier's copy (shared by near hits) stays as stored.
func TestNearCacheKeepsItsOwnCopy(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[map[string]int](t, s.Client(t), 10)
	if err := a.Set(t.Context(), "k", map[string]int{"a": 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k") // tracking is up
	dogpile.NearIndex(a).Drop(dogpile.KeysOf(a, "k").Value)
	hits := a.Stats().NearHits
	m, err := a.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[map[string]int])
	if err != nil || a.Stats().NearHits != hits {
		t.Fatalf("Fetch = %v, %v (near hits %d → %d); want a read from Redis", m, err, hits, a.Stats().NearHits)
	}
	m["a"] = 999 // allowed: a Fetch answered by Redis returns the caller's own copy
	if got := dogpile.FetchNear(t, a, "k"); got["a"] != 1 {
		t.Errorf("near hit = %v after the reader changed its copy; want map[a:1]", got)
	}
}

// TestFetchManyUsesNearTier: FetchMany answers keys the near tier holds
// without a round trip, and fills it with the keys it reads (issue 20: 10
// FetchMany calls of near-cached keys made 10 reads and 0 near hits).
func TestFetchManyUsesNearTier(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	a := dogpile.NewNearCache[string](t, rdb, 100)
	ctx := t.Context()
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		if err := a.Set(ctx, k, "v-"+k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	dogpile.FetchNear(t, a, "a") // tracking is up from here
	many := func() map[string]string {
		got, err := a.FetchMany(ctx, keys, time.Minute, func(context.Context, []string) (map[string]string, error) {
			return nil, errors.New("compute called for cached keys")
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	many() // fills the tier
	before, reads := a.Stats().NearHits, commandCalls(t, rdb, "mget")
	for range 10 {
		if got := many(); len(got) != 3 || got["b"] != "v-b" {
			t.Fatalf("FetchMany = %v", got)
		}
	}
	if n := a.Stats().NearHits - before; n != 30 {
		t.Errorf("10 FetchMany of 3 near-cached keys: %d near hits; want 30", n)
	}
	if n := commandCalls(t, rdb, "mget") - reads; n != 0 {
		t.Errorf("they ran %d MGETs; want 0", n)
	}
	if err := a.Set(ctx, "b", "new", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := many(); got["b"] != "new" {
		t.Errorf("FetchMany after Set = %v; want b: new", got)
	}
}
