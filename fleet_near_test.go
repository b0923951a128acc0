package dogpile_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// fromOther is what procSet stores under "k".
const fromOther = "from the other process"

// procSet, the other process of TestNearCacheOtherProcess: it Sets "k" and
// Deletes "j" through its own client and Cache, then exits.
func procSet(p *proc) {
	p.ready()
	ctx := context.Background()
	p.check("", "", p.c.Set(ctx, "k", fromOther, time.Minute))
	p.check("", "", p.c.Delete(ctx, "j"))
}

// TestNearCacheOtherProcess: process A serves "k" and "j" from its near
// tier; another process (this binary re-executed) Sets "k" and Deletes
// "j". A's Fetch calls then return the new value and the compute's, and
// the new value is served from memory again.
func TestNearCacheOtherProcess(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "nearproc:"
		a := dogpile.New[string](rdb, dogpile.WithPrefix(prefix), dogpile.WithNearCache(100), dogpile.WithNearTest())
		t.Cleanup(func() { _ = a.Close() })
		ctx := t.Context()
		for _, k := range []string{"k", "j"} {
			if err := a.Set(ctx, k, "v1", time.Minute); err != nil {
				t.Fatal(err)
			}
			dogpile.FetchNear(t, a, k)
		}
		invalidations := a.Stats().NearInvalidations
		for _, r := range results(t, goChildren(t, 1, "set", addrs, prefix)) {
			if r.Values != 2 {
				t.Fatalf("the other process: %d of 2 writes done", r.Values)
			}
		}
		// The other process has exited: its writes are in Redis, and their
		// invalidations on their way.
		for k, want := range map[string]string{"k": fromOther, "j": "computed"} {
			redistest.Eventually(t, "the other process's write of "+k, func() bool {
				v, err := a.Fetch(ctx, k, time.Minute, constant("computed"))
				if err != nil {
					t.Fatal(err)
				}
				return v == want
			})
		}
		if got := a.Stats().NearInvalidations; got < invalidations+2 {
			t.Errorf("invalidations received: %d; want at least %d", got-invalidations, 2)
		}
		if v := dogpile.FetchNear(t, a, "k"); v != fromOther {
			t.Fatalf("near hit after the write = %q; want %q", v, fromOther)
		}
	})
}
