package dogpile_test

// Previous: compute sees the value it replaces. Cases of the behaviour
// suite (fetch_test.go).

import (
	"context"
	"sync"
	"sync/atomic"
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

// countingCodec is MsgPack, counting its decodes.
type countingCodec struct{ decodes *atomic.Int64 }

func (c countingCodec) Marshal(v any) ([]byte, error) { return dogpile.MsgPack.Marshal(v) }
func (c countingCodec) Unmarshal(b []byte, v any) error {
	c.decodes.Add(1)
	return dogpile.MsgPack.Unmarshal(b, v)
}

// TestPreviousDecodedOnlyWhenAsked: the value a refresh replaces is decoded
// for its compute only if the compute calls Previous, once a call; a
// compute that returns it unchanged costs one store, and the caller's copy
// of the result (one decode either way).
func TestPreviousDecodedOnlyWhenAsked(t *testing.T) {
	var decodes atomic.Int64
	c := dogpile.New[string](redistest.StartServer(t).Client(t), prefix(t), dogpile.WithCodec(countingCodec{&decodes}))
	ctx := t.Context()
	require.NoError(t, c.Set(ctx, "k", "v1", time.Hour))

	before := decodes.Load()
	_, err := c.Refresh(ctx, "k", time.Hour, redistest.Constant("v2"))
	require.NoError(t, err)
	plain := decodes.Load() - before // the caller's copy of what was stored
	require.Equal(t, int64(1), plain, "decodes in a Refresh whose compute does not ask for Previous")

	before = decodes.Load()
	_, err = c.Refresh(ctx, "k", time.Hour, func(ctx context.Context) (string, error) {
		prev, ok := dogpile.Previous[string](ctx)
		require.True(t, ok, "Previous in a Refresh over v2")
		return prev, nil // unchanged
	})
	require.NoError(t, err)
	require.Equal(t, plain+1, decodes.Load()-before, "decodes in a Refresh whose compute asks for Previous once")
	v, err := c.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "v2", v, "the value a compute returned unchanged")
}
