package dogpile_test

// WithEarlyRefresh: a hot key is refreshed shortly before it expires, so
// that no caller waits for a compute.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// testEarlyRefreshBeforeExpiry, a case of the behaviour suite
// (fetch_test.go): a hit inside the gap before expiry refreshes in the
// background, a hit just before it does not; the refresh's compute is
// given the value it replaces (Previous).
func testEarlyRefreshBeforeExpiry(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	// The gap (early) is at least twice took, at most a third of the TTL;
	// the hits below stay clear of its edges by more than a loaded machine
	// oversleeps (150 ms was not, beside two CPU hogs): 500 ms before it,
	// and at least 300 ms inside it.
	const took, ttl, margin = 300 * time.Millisecond, 3 * time.Second, 500 * time.Millisecond
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithEarlyRefresh(1))
	var n atomic.Int32
	var prev previousLog
	compute := func(ctx context.Context) (string, error) {
		time.Sleep(took)
		v := fmt.Sprint("v", n.Add(1))
		return prev.compute(v)(ctx)
	}
	_, err := c.Fetch(ctx, "k", ttl, compute)
	require.NoError(t, err)
	vk := dogpile.KeysOf(c, "k").Value
	raw, err := dogpile.Client(c).Get(ctx, vk).Bytes()
	require.NoError(t, err)
	mTook, mEarly, err := dogpile.EntryTiming(c, raw)
	require.NoError(t, err, "entry meta")
	if mTook < took || mEarly < min(dogpile.EarlyFloor*mTook, ttl/3) || mEarly > ttl/3 {
		t.Fatalf("entry meta: took %v, early %v; want took >= %v and early in [2·took, ttl/3]", mTook, mEarly, took)
	}
	// Just before the gap a hit serves and refreshes nothing; inside it, a
	// hit serves the current value and refreshes in the background. The
	// key's own PTTL says where the gap is, whatever time the fill took.
	pass(b, dogpile.Client(c).PTTL(ctx, vk).Val()-mEarly-margin)
	if v, _ := c.Fetch(ctx, "k", ttl, compute); v != "v1" {
		t.Fatalf("hit before the gap = %q; want v1", v)
	}
	settle(t, c)
	if n.Load() != 1 {
		t.Fatalf("%d computes after a hit %v before the gap; want no refresh", n.Load(), margin)
	}
	pass(b, dogpile.Client(c).PTTL(ctx, vk).Val()-mEarly/2)
	if v, _ := c.Fetch(ctx, "k", ttl, compute); v != "v1" {
		t.Fatalf("hit inside the gap = %q; want v1 while refreshing", v)
	}
	settle(t, c)
	if v, err := c.Get(ctx, "k"); assert.NoError(t, err, "after the early refresh Get = %q, %v; want v2", v, err) {
		assert.Equal(t, "v2", v, "after the early refresh Get = %q, %v; want v2", v, err)
	}
	if s := c.Stats(); s.Refreshes != 1 || s.Misses != 1 {
		t.Errorf("Stats = %+v; want one refresh and only the first fill missed", s)
	}
	assert.Equal(t, []string{"-", "v1"}, prev.all(), "Previous in the first fill, then in the early refresh")
}
