package dogpile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestTTLJitter: with WithTTLJitter(0.2), values stored together by Set and
// by one FetchMany get TTLs spread over ±20 % of the caller's (the stale
// window added after), so they do not expire together.
func TestTTLJitter(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	c := dogpile.New[int](rdb, prefix(t), dogpile.WithTTLJitter(0.2), dogpile.WithStale(time.Minute))
	const ttl, n = 10 * time.Second, 100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		require.NoError(t, c.Set(ctx, "set"+keys[i], i, ttl))
	}
	if _, err := c.FetchMany(ctx, keys, ttl, func(_ context.Context, missing []string) (map[string]int, error) {
		out := map[string]int{}
		for i, k := range missing {
			out[k] = i
		}
		return out, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"set", ""} {
		lo, hi := time.Hour, time.Duration(0)
		for _, k := range keys {
			pttl, err := rdb.PTTL(ctx, dogpile.KeysOf(c, kind+k).Value).Result()
			require.NoError(t, err)
			fresh := pttl - time.Minute
			if fresh < 8*time.Second-time.Second || fresh > 12*time.Second {
				t.Fatalf("%s%s: fresh for %v; want 10s ± 20%%", kind, k, fresh)
			}
			lo, hi = min(lo, fresh), max(hi, fresh)
		}
		if hi-lo < 2*time.Second {
			t.Errorf("%q keys: TTLs between %v and %v; want them spread over most of 8s..12s", kind, lo, hi)
		}
	}
	mustPanic(t, "WithTTLJitter(1)", func() { dogpile.WithTTLJitter(1) })
	mustPanic(t, "WithTTLJitter(0)", func() { dogpile.WithTTLJitter(0) })
}
