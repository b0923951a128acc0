package dogpile_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestNearCacheLateInvalidations: invalidations that arrive late bypass the
// tier: a write that returned more than MaxLag (near.Config) ago is never
// answered from it with the value it replaced, though the tracking
// connection neither fails nor falls silent. Once they are applied, the
// tier serves.
// Found by the torture run (seed 4874054713374990276: a near hit 132 ms
// after another process's Set returned, its invalidation held back by a
// proxy that delayed replies); here the tracker holds it back itself.
func TestNearCacheLateInvalidations(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	var held sync.Mutex
	dogpile.Tracker(a).BeforeApply = func() { held.Lock(); held.Unlock() } // waits while the test holds it
	dogpile.FetchNear(t, a, "k")

	held.Lock()
	if err := b.Set(ctx, "k", "v2", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * dogpile.Tracker(a).Config().MaxLag) // past the bound, its invalidation still held back
	hits := a.Stats().NearHits
	v := dogpile.FetchValue(t, a, "k")
	held.Unlock()
	if v != "v2" {
		t.Errorf("Fetch %v after another process's Set returned, its invalidation held back = %q; want v2",
			2*dogpile.Tracker(a).Config().MaxLag, v)
	}
	if s := a.Stats(); s.NearHits != hits || s.NearLate == 0 {
		t.Errorf("Stats = %+v: want no near hit while an invalidation was late, and NearLate counting the bypass", s)
	}
	if v := dogpile.FetchNear(t, a, "k"); v != "v2" {
		t.Errorf("near hit once the invalidation is applied = %q; want v2", v)
	}
}

// TestNearCacheTrackingReplaced: a tracking connection that breaks while
// the tracker is busy, and that go-redis replaces on its next write (a
// heartbeat's ping), ends the session: what Redis sent meanwhile is lost,
// so the tier is emptied instead of reading on from the new connection.
func TestNearCacheTrackingReplaced(t *testing.T) {
	s := redistest.StartServer(t)
	raw := s.Client(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	dogpile.Tracker(a).BeforeApply = func() {
		if once.Load() && once.CompareAndSwap(true, false) {
			// The connection dies between two messages, and a write's
			// invalidation goes with it.
			if err := raw.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
				t.Error(err)
			}
			if err := b.Set(ctx, "k", "v2", time.Minute); err != nil {
				t.Error(err)
			}
			time.Sleep(5 * dogpile.Tracker(a).Config().Beat) // beats find the broken connection
		}
	}
	if err := b.Set(ctx, "other", "x0", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")
	dogpile.FetchNear(t, a, "other") // read: Redis reports its writes
	once.Store(true)
	if err := b.Set(ctx, "other", "x", time.Minute); err != nil { // a message to apply
		t.Fatal(err)
	}
	redistest.Eventually(t, "the killed connection's message applied", func() bool { return !once.Load() })
	time.Sleep(2 * dogpile.Tracker(a).Config().MaxLag)
	if v := dogpile.FetchValue(t, a, "k"); v != "v2" {
		t.Errorf("Fetch after the tracking connection was replaced = %q; want v2", v)
	}
}

// TestNearCacheLateInvalidationFlight: the same for a flight. A Fetch that
// starts more than MaxLag (near.Config) after another process's write
// returned does not join a flight of its process that read before the
// write, while the write's invalidation (which would forget that flight)
// is held back: it reads Redis itself. Found by the torture run (seed
// 14398668659528063128: a Fetch joined a read delayed 900 ms and returned
// the value a Refresh had replaced 800 ms before).
func TestNearCacheLateInvalidationFlight(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t)
	dogpile.InstallHolder(t, rdb) // before the tier is made: its readers get the hook too
	a := dogpile.NewNearCache[string](t, rdb, 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.Set(ctx, "warm", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "warm")
	var held sync.Mutex
	dogpile.Tracker(a).BeforeApply = func() { held.Lock(); held.Unlock() } // waits while the test holds it
	later, finish := dogpile.StartHeldFetch(t, rdb, a, "k")
	held.Lock()
	if err := b.Set(ctx, "k", "new", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * dogpile.Tracker(a).Config().MaxLag) // past the bound, its invalidation still held back
	later()
	v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("fresh"))
	held.Unlock()
	if err != nil || v != "new" {
		t.Errorf("Fetch %v after another process's Set returned, its invalidation held back = %q, %v; want new",
			2*dogpile.Tracker(a).Config().MaxLag, v, err)
	}
	if v, err := finish(); err != nil || v != "old" {
		t.Errorf("the held Fetch = %q, %v; want old", v, err)
	}
}
