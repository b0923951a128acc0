package dogpile_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// holdInvalidations makes c's tracker hold back the invalidations it
// receives until the returned release is called (at the latest when the
// test ends: a tracker stuck in BeforeApply would hang its cleanup).
func holdInvalidations(t *testing.T, c *dogpile.Cache[string]) (release func()) {
	var held sync.Mutex
	dogpile.Tracker(c).BeforeApply = func() { held.Lock(); held.Unlock() }
	held.Lock()
	var once sync.Once
	release = func() { once.Do(held.Unlock) }
	t.Cleanup(release)
	return release
}

// TestNearCacheInvalidateTagAfterAnother: once InvalidateTag returned, its
// process's near tier serves no value tagged before it, also one that
// another process's InvalidateTag of the tag voided first, whose
// invalidation has not reached this tier yet: this call finds it gone from
// the tag's set and has nothing of its own to drop. Found by the torture
// run (seed 12742486827157056321: a near hit 21 ms after its own process's
// InvalidateTag returned). In "during", the other InvalidateTag voids the
// value while this one runs, after the tier's beats have been answered
// since this one began.
func TestNearCacheInvalidateTagAfterAnother(t *testing.T) {
	for _, during := range []bool{false, true} {
		name := map[bool]string{false: "before", true: "during"}[during]
		t.Run(name, func(t *testing.T) {
			s := redistest.StartServer(t)
			ca := s.Client(t)
			a := dogpile.NewNearCache[string](t, ca, 100)
			b := dogpile.New[string](s.Client(t), prefix(t))
			ctx := t.Context()
			if err := b.SetTagged(ctx, "k", "v1", time.Minute, "T"); err != nil {
				t.Fatal(err)
			}
			dogpile.FetchNear(t, a, "k")
			var release func()
			other := func() {
				release = holdInvalidations(t, a)
				if err := b.InvalidateTag(ctx, "T"); err != nil {
					t.Error(err)
				}
			}
			var armed atomic.Bool
			ca.AddHook(redistest.Hook{Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				if n := cmd.Name(); (n == "evalsha" || n == "eval") && armed.CompareAndSwap(true, false) {
					time.Sleep(3 * dogpile.Tracker(a).Config().Beat) // beats answered since a's InvalidateTag began
					other()
				}
				return next(ctx, cmd)
			}})
			if during {
				armed.Store(true) // before a's first script: the tag's bump
			} else {
				other()
			}
			if err := a.InvalidateTag(ctx, "T"); err != nil {
				t.Fatal(err)
			}
			v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("v2"))
			release()
			if err != nil || v != "v2" {
				t.Errorf("Fetch after this process's InvalidateTag returned = %q, %v; want v2, not the voided value", v, err)
			}
		})
	}
}

// TestNearCacheInvalidateTagReaderKilled: the same when the invalidation
// never comes: the connection that read the value was closed by Redis
// without a word, which drops its tracking, and the tier learns it only at
// that reader's next ping. Found by the torture run (seed
// 2786331782042390570: a near hit 19 ms after its own process's
// InvalidateTag returned, a proxy closing connections meanwhile).
func TestNearCacheInvalidateTagReaderKilled(t *testing.T) {
	s := redistest.StartServer(t)
	admin := s.Client(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.SetTagged(ctx, "k", "v1", time.Minute, "T"); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")
	killReaders(t, admin)
	invalidateAfterAnother(t, a, b)
}

// invalidateAfterAnother has b (another process's Cache) and then a
// invalidate tag T, and fails t unless a's next Fetch of "k", tagged T,
// computes: a's tier serves nothing T voided.
func invalidateAfterAnother(t *testing.T, a, b *dogpile.Cache[string]) {
	t.Helper()
	ctx := t.Context()
	if err := b.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if err := a.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("v2")); err != nil || v != "v2" {
		t.Fatalf("Fetch after this process's InvalidateTag returned = %q, %v; want v2, not the voided value", v, err)
	}
}

// TestNearCacheInvalidateTagKeepsTheRest: the wait is for the answers to
// pings sent at once, not an emptied tier: with the other process's
// invalidation on time, the voided value is gone and an untagged one
// stays. (Answers later than MaxLag, near.Config's, empty the tier: a
// loaded machine gets three tries.)
func TestNearCacheInvalidateTagKeepsTheRest(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	b := dogpile.New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	kept := false
	for try := 0; try < 3 && !kept; try++ {
		if err := b.SetTagged(ctx, "k", "v1", time.Minute, "T"); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(ctx, "other", "o", time.Minute); err != nil {
			t.Fatal(err)
		}
		dogpile.FetchNear(t, a, "k")
		dogpile.FetchNear(t, a, "other")
		invalidateAfterAnother(t, a, b)
		kept = dogpile.NearHas(a, "other")
	}
	if !kept {
		t.Error("an untagged value left the near tier at each of 3 InvalidateTags: the wait emptied the tier")
	}
}
