package dogpile_test

// SetTTL: a compute chooses its result's TTL, zero for "do not store".
// Cases of the behaviour suite (fetch_test.go).

import (
	"context"
	"errors"
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
