package dogpile

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestNearCacheLateInvalidations: invalidations that arrive late (a network
// that holds the tracking connection's replies back, so that it neither
// fails nor falls silent) bypass the tier: a write that returned more than
// near.MaxLag ago is never answered from it with the value it replaced.
// Once answers come on time again, the tier serves. Found by the torture
// run (seed 4874054713374990276): a near hit 132 ms after another process's
// Set returned, its invalidation held back by a proxy.
func TestNearCacheLateInvalidations(t *testing.T) {
	s := redistest.StartServer(t)
	p := redistest.StartProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { rdb.Close() })
	a := newNearCache[string](t, rdb, 100)
	b := New[string](s.Client(t), prefix(t))
	ctx := t.Context()
	if err := b.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	fetchNear(t, a, "k")

	const delay = 500 * time.Millisecond
	p.DelayReplies(delay)
	if err := b.Set(ctx, "k", "v2", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * near.MaxLag) // past the bound, its invalidation still held back
	hits := a.Stats().NearHits
	if v := fetchValue(t, a, "k"); v != "v2" {
		t.Errorf("Fetch %v after another process's Set returned, invalidations %v late = %q; want v2",
			2*near.MaxLag, delay, v)
	}
	if a.Stats().NearHits != hits {
		t.Error("answered from the near tier while its invalidations were late")
	}

	p.DelayReplies(0)
	if v := fetchNear(t, a, "k"); v != "v2" {
		t.Errorf("near hit once invalidations are on time = %q; want v2", v)
	}
}
