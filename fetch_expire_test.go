package dogpile_test

// Expire: soft invalidation. Cases of the behaviour suite (fetch_test.go).

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// testExpireServesStale: with WithStale, Expire makes a fresh value stale
// in every process: the next Fetch anywhere answers the old value at once
// and one process refreshes it; a value already absent stays absent.
func testExpireServesStale(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour))
	_, err := a.Fetch(ctx, "k", time.Hour, redistest.Constant("v1"))
	require.NoError(t, err)
	require.NoError(t, a.Expire(ctx, "k"))

	var computes atomic.Int32
	release := make(chan struct{})
	refresh := func(context.Context) (string, error) {
		computes.Add(1)
		<-release
		return "v2", nil
	}
	for _, c := range []*dogpile.Cache[string]{a, o} {
		soon, cancel := context.WithTimeout(ctx, 10*time.Second) // a miss would wait for release
		v, err := c.Fetch(soon, "k", time.Hour, refresh)
		cancel()
		if v != "v1" || err != nil {
			t.Fatalf("Fetch after Expire = %q, %v; want the old value v1, at once", v, err)
		}
	}
	redistest.Eventually(t, "a refresh to start", func() bool { return computes.Load() > 0 })
	close(release)
	settle(t, a)
	settle(t, o)
	if v, err := o.Fetch(ctx, "k", time.Hour, redistest.Constant("unused")); err != nil || v != "v2" {
		t.Errorf("Fetch after the refresh = %q, %v; want v2", v, err)
	}
	if n, sa, so := computes.Load(), a.Stats(), o.Stats(); n != 1 || sa.Stale != 1 || so.Stale != 1 {
		t.Errorf("refresh computes %d, Stale %d and %d; want 1, 1 and 1", n, sa.Stale, so.Stale)
	}
	pttl, err := dogpile.Client(a).PTTL(ctx, dogpile.KeysOf(a, "k").Value).Result()
	if err != nil || pttl <= 59*time.Minute {
		t.Errorf("PTTL after the refresh = %v, %v; want a fresh TTL and the stale window", pttl, err)
	}

	// A not-found tombstone has no value to serve stale: Expire removes it.
	n := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour), dogpile.WithNegativeTTL(time.Hour))
	_, err = n.Fetch(ctx, "gone", time.Hour, func(context.Context) (string, error) { return "", dogpile.ErrNotFound })
	require.ErrorIs(t, err, dogpile.ErrNotFound)
	require.NoError(t, n.Expire(ctx, "gone"))
	if v, err := n.Fetch(ctx, "gone", time.Hour, redistest.Constant("back")); err != nil || v != "back" {
		t.Errorf("Fetch after Expire of a tombstone = %q, %v; want back, computed", v, err)
	}

	require.NoError(t, a.Expire(ctx, "absent"))
	if _, err := a.Get(ctx, "absent"); !errors.Is(err, dogpile.ErrMiss) {
		t.Errorf("Get of an absent key after Expire: err = %v; want ErrMiss", err)
	}
	if err := a.Expire(ctx, ""); !errors.Is(err, dogpile.ErrInvalid) {
		t.Errorf("Expire of an empty key: err = %v; want ErrInvalid", err)
	}
}

// testExpireWithoutStale: without WithStale, Expire is Delete: the next
// Fetch computes, and a compute in progress is fenced off.
func testExpireWithoutStale(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	_, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("v1"))
	require.NoError(t, err)
	require.NoError(t, c.Expire(ctx, "k"))
	if _, err := c.Get(ctx, "k"); !errors.Is(err, dogpile.ErrMiss) {
		t.Errorf("Get after Expire: err = %v; want ErrMiss", err)
	}
	if v, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("v2")); err != nil || v != "v2" {
		t.Errorf("Fetch after Expire = %q, %v; want v2, computed", v, err)
	}
}
