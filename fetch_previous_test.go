package dogpile_test

// Previous: compute sees the value it replaces. Cases of the behaviour
// suite (fetch_test.go).

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A previousLog records what Previous told each compute.
type previousLog struct {
	mu   sync.Mutex
	seen []string // the previous value, or "-" for none
}

func (p *previousLog) compute(result string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		prev, ok := dogpile.Previous[string](ctx)
		if _, wrongType := dogpile.Previous[int](ctx); wrongType {
			panic("Previous[int] answered in a Cache[string]")
		}
		if !ok {
			prev = "-"
		}
		p.mu.Lock()
		p.seen = append(p.seen, prev)
		p.mu.Unlock()
		return result, nil
	}
}

func (p *previousLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

// testPreviousValue: a first fill knows no previous value; a Refresh is
// given the value it passes over, and a stale value's background refresh
// the stale value; a not-found tombstone is no value.
func testPreviousValue(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour),
		dogpile.WithNegativeTTL(time.Hour))
	var p previousLog
	_, err := c.Fetch(ctx, "k", 100*time.Millisecond, p.compute("v1"))
	require.NoError(t, err)
	_, err = c.Refresh(ctx, "k", 100*time.Millisecond, p.compute("v2"))
	require.NoError(t, err)
	require.Equal(t, []string{"-", "v1"}, p.all(), "Previous in a first fill, then in a Refresh")

	pass(b, 150*time.Millisecond) // v2 is stale now
	v, err := c.Fetch(ctx, "k", time.Hour, p.compute("v3"))
	require.NoError(t, err)
	require.Equal(t, "v2", v, "a stale Fetch")
	settle(t, c)
	require.Equal(t, []string{"-", "v1", "v2"}, p.all(), "Previous in the background refresh of stale v2")

	_, err = c.Fetch(ctx, "gone", time.Hour, func(context.Context) (string, error) { return "", dogpile.ErrNotFound })
	require.ErrorIs(t, err, dogpile.ErrNotFound)
	_, err = c.Refresh(ctx, "gone", time.Hour, p.compute("back"))
	require.NoError(t, err)
	require.Equal(t, "-", p.all()[3], "Previous in a Refresh over a not-found tombstone")

	if _, ok := dogpile.Previous[string](ctx); ok {
		t.Error("Previous outside a compute answered")
	}
}
