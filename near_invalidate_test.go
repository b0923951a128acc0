package dogpile

import (
	"sync"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestNearCacheInvalidateTagAfterAnother: once InvalidateTag returned, its
// process's near tier serves no value tagged before it, also one that
// another process's InvalidateTag of the tag voided first, whose
// invalidation has not reached this tier yet: this call finds it gone from
// the tag's set and has nothing of its own to drop. Found by the torture
// run (seed 12742486827157056321: a near hit 21 ms after its own process's
// InvalidateTag returned).
func TestNearCacheInvalidateTagAfterAnother(t *testing.T) {
	s := redistest.StartServer(t)
	a := newNearCache[string](t, s.Client(t), 100)
	b := New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.SetTagged(ctx, "k", "v1", time.Minute, "T"); err != nil {
		t.Fatal(err)
	}
	fetchNear(t, a, "k")
	var held sync.Mutex
	a.near.t.BeforeApply = func() { held.Lock(); held.Unlock() } // waits while the test holds it
	held.Lock()
	if err := b.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	released := time.AfterFunc(2*time.Second, held.Unlock)
	defer released.Stop()
	if err := a.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	v, err := a.Fetch(ctx, "k", time.Minute, constant("v2"))
	if released.Stop() {
		held.Unlock()
	}
	if err != nil || v != "v2" {
		t.Errorf("Fetch after this process's InvalidateTag returned = %q, %v; want v2, not the voided value", v, err)
	}
}

// TestNearCacheInvalidateTagKeepsTheRest: the wait is for the tier's next
// beat, not an emptied tier: with the other process's invalidation on time,
// the voided value is gone and an untagged one is still a near hit.
func TestNearCacheInvalidateTagKeepsTheRest(t *testing.T) {
	s := redistest.StartServer(t)
	a := newNearCache[string](t, s.Client(t), 100)
	b := New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.SetTagged(ctx, "k", "v1", time.Minute, "T"); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, "other", "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	fetchNear(t, a, "k")
	fetchNear(t, a, "other")
	if err := b.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if err := a.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Fetch(ctx, "k", time.Minute, constant("v2")); err != nil || v != "v2" {
		t.Errorf("Fetch after this process's InvalidateTag returned = %q, %v; want v2", v, err)
	}
	hits := a.Stats().NearHits
	if v := fetchValue(t, a, "other"); v != "o" || a.Stats().NearHits != hits+1 {
		t.Errorf("an untagged value after InvalidateTag = %q, near hits %d -> %d; want o, a near hit", v, hits, a.Stats().NearHits)
	}
}
