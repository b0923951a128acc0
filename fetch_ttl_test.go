package dogpile_test

// SetTTL: a compute chooses its result's TTL, zero for "do not store".
// Cases of the behaviour suite (fetch_test.go).

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func testSetTTLFromCompute(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	_, err := c.Fetch(ctx, "k", time.Hour, func(ctx context.Context) (string, error) {
		dogpile.SetTTL(ctx, 5*time.Second) // e.g. Cache-Control: max-age=5
		return "v", nil
	})
	require.NoError(t, err)
	pttl, err := dogpile.Client(c).PTTL(ctx, dogpile.KeysOf(c, "k").Value).Result()
	if err != nil || pttl <= 0 || pttl > 5*time.Second {
		t.Errorf("PTTL = %v, %v; want at most the 5s compute set", pttl, err)
	}
}

func testSetTTLZeroStoresNothing(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, a, o, ctx, "k", func(ctx context.Context) (string, error) {
		dogpile.SetTTL(ctx, 0) // e.g. Cache-Control: max-age=0
		return "partial", nil
	})
	close(release)
	for who, ch := range map[string]chan result[string]{"holder": hres, "waiter": wres} {
		if r := <-ch; r.v != "partial" || r.err != nil {
			t.Errorf("%s = %q, %v; want the value, handed over though not stored", who, r.v, r.err)
		}
	}
	if _, err := a.Get(ctx, "k"); !errors.Is(err, dogpile.ErrMiss) {
		t.Errorf("Get: err = %v; want ErrMiss (not stored)", err)
	}
}

// testDefaultTTL: with WithDefaultTTL, a ttl of 0 means the default for
// every call that takes one; a ttl given still wins, and a negative one is
// still invalid. Without it, 0 is invalid and names the option.
func testDefaultTTL(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	const def = 40 * time.Second
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithDefaultTTL(def))
	pttl := func(key string) time.Duration {
		t.Helper()
		d, err := dogpile.Client(c).PTTL(ctx, dogpile.KeysOf(c, key).Value).Result()
		require.NoError(t, err)
		return d
	}
	inDefault := func(call, key string) {
		t.Helper()
		if d := pttl(key); d <= def-10*time.Second || d > def {
			t.Errorf("%s with ttl 0: PTTL = %v; want about the default %v", call, d, def)
		}
	}
	_, err := c.Fetch(ctx, "fetch", 0, redistest.Constant("v"))
	require.NoError(t, err)
	inDefault("Fetch", "fetch")
	_, err = c.FetchMany(ctx, []string{"many"}, 0, func(context.Context, []string) (map[string]string, error) {
		return map[string]string{"many": "v"}, nil
	})
	require.NoError(t, err)
	inDefault("FetchMany", "many")
	_, err = c.Refresh(ctx, "refresh", 0, redistest.Constant("v"))
	require.NoError(t, err)
	inDefault("Refresh", "refresh")
	require.NoError(t, c.Set(ctx, "set", "v", 0))
	inDefault("Set", "set")
	require.NoError(t, c.SetTagged(ctx, "tagged", "v", 0, "t"))
	inDefault("SetTagged", "tagged")

	require.NoError(t, c.Set(ctx, "given", "v", time.Hour))
	if d := pttl("given"); d <= def {
		t.Errorf("Set with ttl 1h: PTTL = %v; want the ttl given, not the default", d)
	}
	if err := c.Set(ctx, "negative", "v", -time.Second); !errors.Is(err, dogpile.ErrInvalid) {
		t.Errorf("Set with ttl -1s: err = %v; want ErrInvalid", err)
	}
	plain := dogpile.New[string](b.Client(t), prefix(t))
	if _, err := plain.Fetch(ctx, "fetch", 0, redistest.Constant("v")); !errors.Is(err, dogpile.ErrInvalid) ||
		!strings.Contains(err.Error(), "WithDefaultTTL") {
		t.Errorf("Fetch with ttl 0 and no default: err = %v; want ErrInvalid naming WithDefaultTTL", err)
	}
}
