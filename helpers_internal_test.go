package dogpile

// The helpers of the white-box tests (package dogpile); those of the
// behaviour tests are in helpers_test.go.

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// nearTest is the near tier's config in this package's tests, given to
// every Cache with a near tier (withNear; newNearCache and WithNearTest do
// it): trackers notice a silent connection, and an idle Cache, sooner; and
// a tracker stalled by the race detector on a loaded machine does not turn
// near hits that tests count into reads.
func nearTest() near.Config {
	return near.Config{Ping: 100 * time.Millisecond, Idle: time.Second, MaxLag: 300 * time.Millisecond}
}

// prefix gives each test keys of its own (its name is the prefix), so that
// the cases of a suite share one deployment.
func prefix(t *testing.T) Option { return WithPrefix(t.Name() + ":") }

// settle waits until c runs no background refresh (they outlive the Fetch
// that started them), so that each test ends with no goroutine of its own.
func settle[T any](t *testing.T, c *Cache[T]) {
	t.Helper()
	redistest.Eventually(t, "the background work to end", func() bool {
		return c.flights.Len() == 0
	})
}

// newNearCache returns a Cache with a near tier, configured by nearTest,
// whose tracker is stopped (and its goroutines waited for) when the test
// ends.
func newNearCache[T any](t *testing.T, rdb redis.UniversalClient, size int, opts ...Option) *Cache[T] {
	t.Helper()
	c := New[T](rdb, append([]Option{prefix(t), WithNearCache(size), withNear(nearTest())}, opts...)...)
	if hd, ok := holders.Load(rdb); ok && c.near != nil { // see installHolder
		c.near.Tracker().ReaderHook = hd.(*holder).hook
	}
	t.Cleanup(c.near.Tracker().Stop)
	return c
}

// fetchNear fetches key until the answer comes from the near tier (tracking
// is in place and the value was read once), and returns it.
func fetchNear[T any](t *testing.T, c *Cache[T], key string) T {
	t.Helper()
	var v T
	redistest.Eventually(t, "a near hit on "+key, func() bool {
		before := c.Stats().NearHits
		var err error
		if v, err = c.Fetch(t.Context(), key, time.Minute, redistest.NoCompute[T]); err != nil {
			t.Fatalf("Fetch(%q): %v", key, err)
		}
		return c.Stats().NearHits > before
	})
	return v
}

// fetchValue is a Fetch of key that must not compute.
func fetchValue[T any](t *testing.T, c *Cache[T], key string) T {
	t.Helper()
	v, err := c.Fetch(t.Context(), key, time.Minute, redistest.NoCompute[T])
	if err != nil {
		t.Fatalf("Fetch(%q): %v", key, err)
	}
	return v
}
