package dogpile_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestNearCacheReportsOnlyToHolders: in the default tracking mode a write
// is reported only to the processes whose tier read the key: a Set of a
// key one process holds sends nothing to another, and a key nobody read
// costs no message at all (broadcast mode sent each to every process).
func TestNearCacheReportsOnlyToHolders(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	b := dogpile.NewNearCache[string](t, s.Client(t), 100)
	w := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	for _, k := range []string{"a", "b", "marker"} {
		if err := w.Set(ctx, k, "v1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	dogpile.FetchNear(t, a, "a")
	dogpile.FetchNear(t, b, "b")
	dogpile.FetchNear(t, b, "marker")
	for i := range 20 {
		if err := w.Set(ctx, "nobody", "x", time.Minute); err != nil {
			t.Fatal(err)
		}
		if i < 10 {
			if err := w.Set(ctx, "a", "v2", time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The marker's write is reported after the writes before it (one
	// connection, in order): once b has applied it, b has seen all it
	// would be sent.
	if err := w.Set(ctx, "marker", "v2", time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "b to apply the marker's invalidation", func() bool { return b.Stats().NearInvalidations > 0 })
	redistest.Eventually(t, "a to apply a's invalidation", func() bool { return a.Stats().NearInvalidations > 0 })
	// A key is reported once per reader that read it (a Fetch that found
	// tracking not yet in place may have read it on a second one).
	if n, readers := b.Stats().NearInvalidations, dogpile.Tracker(b).Config().Readers; n > uint64(readers) {
		t.Errorf("b, which holds b and marker, applied %d invalidations; want marker's alone (at most %d)", n, readers)
	}
	if n, readers := a.Stats().NearInvalidations, dogpile.Tracker(a).Config().Readers; n > uint64(readers) {
		t.Errorf("a, which read a once, applied %d invalidations for 10 writes; want one per reader that read it (at most %d)", n, readers)
	}
	if v := dogpile.FetchValue(t, a, "a"); v != "v2" {
		t.Errorf("a's Fetch of a after its invalidation = %q; want v2", v)
	}
}

// killReaders closes every near-tier reader connection on admin's server
// with CLIENT KILL (the subscribers stay), as Redis would without a word.
func killReaders(t *testing.T, admin *redis.Client) {
	t.Helper()
	killed := 0
	for _, c := range tracked(t, admin) {
		if !strings.Contains(c["flags"], "P") { // a reader, not the subscriber
			if err := admin.ClientKillByFilter(t.Context(), "ID", c["id"]).Err(); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed == 0 {
		t.Fatal("no reader to kill")
	}
}

// TestNearCacheReaderKilled: a connection that read values into the tier
// and that Redis closes without telling (a CLIENT KILL, the server's idle
// timeout) takes with it the record of what it read, so later writes of
// those keys are reported to nobody. Its values stop being served: a write
// that returned more than 100 ms ago is not answered from the tier with
// the value it replaced.
func TestNearCacheReaderKilled(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Client(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	for _, k := range []string{"k", "other"} {
		if err := b.Set(ctx, k, "v1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	dogpile.FetchNear(t, a, "k")
	killReaders(t, admin)
	// A read on the killed reader, before its ping finds it dead, goes
	// through the client instead of failing the Fetch.
	if v := dogpile.FetchValue(t, a, "other"); v != "v1" {
		t.Errorf("Fetch of another key at once = %q; want v1", v)
	}
	if err := b.Set(ctx, "k", "v2", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * dogpile.Tracker(a).Config().MaxLag)
	if v := dogpile.FetchValue(t, a, "k"); v != "v2" {
		t.Errorf("Fetch %v after a Set, the reader of the old value killed = %q; want v2", 2*dogpile.Tracker(a).Config().MaxLag, v)
	}
	if v := dogpile.FetchNear(t, a, "k"); v != "v2" {
		t.Errorf("near hit read through a new reader = %q; want v2", v)
	}
}

// TestNearCacheUntrackedFlight: a Fetch whose read of Redis went out on no
// tracked connection (the tier's reader was busy) is not joined: a write
// that returns meanwhile is reported to nobody here, and a Fetch that
// starts after it must not take the value it replaced.
func TestNearCacheUntrackedFlight(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t)
	dogpile.InstallHolder(t, rdb)
	none := func(cfg *near.Config) { cfg.Readers = -1 } // every read goes through the client, and none is tracked
	c := dogpile.NewNearCache[string](t, rdb, 100, dogpile.WithNearTest(none))
	ctx := t.Context()
	if _, err := c.Fetch(ctx, "warm", time.Minute, redistest.Constant("w")); err != nil {
		t.Fatal(err)
	}
	// The tier up and proven: a join shares flights only then. (While it
	// is down, a Cache shares flights as one without a tier does, and a
	// write of another Cache is heard by none: the test says nothing then.)
	heard := func() bool { return dogpile.NearIndex(c).Up() && dogpile.Tracker(c).Heard(near.Now()) }
	for attempt := range 5 {
		redistest.Eventually(t, "tracking in place", heard)
		key, flushes := fmt.Sprint("k", attempt), c.Stats().NearFlushes
		later, finish := dogpile.StartHeldFetch(t, rdb, c, key)
		other := dogpile.New[string](s.Client(t), prefix(t))
		if err := other.Set(ctx, key, "new", time.Minute); err != nil {
			t.Fatal(err)
		}
		later()
		v, err := c.Fetch(ctx, key, time.Minute, redistest.Constant("fresh"))
		if held, herr := finish(); herr != nil || held != "old" {
			t.Errorf("the held Fetch = %q, %v; want old", held, herr)
		}
		if c.Stats().NearFlushes != flushes {
			t.Logf("attempt %d: the tier went down meanwhile (a loaded machine missed its pings); again", attempt)
			continue
		}
		if err != nil || v != "new" {
			t.Errorf("Fetch after another process's Set returned = %q, %v; want new", v, err)
		}
		return
	}
	t.Fatal("the tier went down in every attempt")
}

// TestNearCacheSmallPool: the tier's connections are its own: a client of
// one connection still serves its user's commands once the tier is up.
func TestNearCacheSmallPool(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1, PoolTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	a := dogpile.NewNearCache[string](t, rdb, 100)
	ctx := t.Context()
	if err := a.Set(ctx, "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")
	if err := rdb.Set(ctx, "user", "x", time.Minute).Err(); err != nil {
		t.Errorf("the user's own SET on a pool of one, the tier up: %v", err)
	}
}

// TestNearCacheCloseFrozenServer: Close returns at once though the server
// is frozen and the client waits for replies without a timeout: the
// tier's reads and pings in flight end with their connections, and its
// handshakes are bounded.
func TestNearCacheCloseFrozenServer(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	a := dogpile.New[string](rdb, prefix(t), dogpile.WithNearCache(100), dogpile.WithNearTest())
	ctx := t.Context()
	if err := a.Set(ctx, "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")
	s.Pause()
	defer s.Resume()
	// Once the subscriber's pings go unanswered, the idle reader's (every
	// MaxLag/2) are in flight too.
	redistest.Eventually(t, "the tier to find the server silent", func() bool { return !dogpile.Tracker(a).Heard(near.Now()) })
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// A session may be in its handshake, which waits Ping at most.
	if d, ping := time.Since(start), dogpile.Tracker(a).Config().Ping; d > 3*ping {
		t.Errorf("Close took %v with the server frozen; want at most %v", d, 3*ping)
	}
}

// TestNearCacheComputeWhenDownShared: with Redis down, tracking is not in
// place and the process hears nothing of other writes, as without a tier:
// concurrent Fetches of a key share one compute (WithComputeWhenDown), as
// they do without a tier, instead of one each.
func TestNearCacheComputeWhenDownShared(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100, dogpile.WithComputeWhenDown())
	ctx := t.Context()
	if err := a.Set(ctx, "warm", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "warm")
	s.Kill()
	redistest.Eventually(t, "tracking to drop", func() bool { return !dogpile.NearIndex(a).Up() })
	var computes atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			v, err := a.Fetch(ctx, "k", time.Minute, func(context.Context) (string, error) {
				// The compute lasts until the other 19 joined its flight, not
				// a fixed time that a caller started late on a busy machine
				// would miss: a caller that started a flight of its own is
				// a second compute, and this one then gives up waiting.
				computes.Add(1)
				redistest.Within(10*time.Second, func() bool { return a.Stats().Shared >= 19 })
				return "v", nil
			})
			if err != nil || v != "v" {
				t.Errorf("Fetch with Redis down = %q, %v; want v", v, err)
			}
		})
	}
	wg.Wait()
	if n := computes.Load(); n != 1 {
		t.Errorf("%d computes for 20 concurrent Fetches with Redis down; want 1", n)
	}
}
