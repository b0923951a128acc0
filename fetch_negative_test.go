package dogpile_test

// WithNegativeTTL: a compute's ErrNotFound is remembered in every process
// for a while; without it, nothing is stored. Cases of the behaviour suite
// (fetch_test.go).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func testNegativeCaching(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithNegativeTTL(time.Minute), dogpile.WithLease(time.Minute))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithNegativeTTL(time.Minute), dogpile.WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, a, o, ctx, "k", func(context.Context) (string, error) {
		return "", fmt.Errorf("no such beer: %w", dogpile.ErrNotFound)
	})
	close(release)
	for who, ch := range map[string]chan result[string]{"holder": hres, "waiter": wres} {
		if r := <-ch; !errors.Is(r.err, dogpile.ErrNotFound) || errors.Is(r.err, dogpile.ErrComputeFailed) {
			t.Errorf("%s: err = %v; want ErrNotFound", who, r.err)
		}
	}
	// Remembered in every process: no compute until the negative TTL ends.
	var computes atomic.Int32
	for _, c := range []*dogpile.Cache[string]{a, o} {
		_, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (string, error) {
			computes.Add(1)
			return "found", nil
		})
		assert.ErrorIs(t, err, dogpile.ErrNotFound, "Fetch of a tombstone: err = %v; want ErrNotFound", err)
		_, err = c.Get(ctx, "k")
		assert.ErrorIs(t, err, dogpile.ErrNotFound, "Get of a tombstone: err = %v; want ErrNotFound", err)
	}
	assert.Zero(t, computes.Load(), "computes while not found is cached; want 0")
	pttl, err := dogpile.Client(a).PTTL(ctx, dogpile.KeysOf(a, "k").Value).Result()
	if err != nil || pttl <= 0 || pttl > time.Minute {
		t.Errorf("tombstone PTTL = %v, %v; want the negative TTL", pttl, err)
	}
}

func testNotFoundWithoutNegativeTTL(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, a, o, ctx, "k", func(context.Context) (string, error) {
		return "", dogpile.ErrNotFound
	})
	close(release)
	assert.ErrorIs(t, (<-hres).err, dogpile.ErrNotFound, "holder: want ErrNotFound")
	if r := <-wres; !errors.Is(r.err, dogpile.ErrNotFound) || errors.Is(r.err, dogpile.ErrComputeFailed) {
		t.Errorf("waiter: err = %v; want ErrNotFound, not ErrComputeFailed", r.err)
	}
	_, err := a.Get(ctx, "k")
	assert.ErrorIs(t, err, dogpile.ErrMiss, "Get after not found: err = %v; want ErrMiss (nothing stored)", err)
}
