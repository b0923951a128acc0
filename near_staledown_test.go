package dogpile_test

// WithStaleIfDown: the near tier's copies served while Redis is frozen,
// up to their stale point, and never once it answers again.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// frozenClient is a client of s whose reads give up after 200 ms, so that
// a frozen server opens its circuit within about half a second (the
// breaker's PING waits as long: see docs/design.md, "The circuit
// breaker").
func frozenClient(t *testing.T, s *redistest.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// warmNear sets key to v for ttl and fetches it until c's near tier holds
// it. Set, not a first Fetch: a tracked read that found the key missing
// would bring an invalidation of it by the store, which may arrive after
// the next read and remove the copy that one put.
func warmNear(t *testing.T, c *dogpile.Cache[string], key string, ttl time.Duration, v string) {
	t.Helper()
	if err := c.Set(t.Context(), key, v, ttl); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
	redistest.Eventually(t, key+" in the near tier", func() bool {
		if _, err := c.Fetch(t.Context(), key, ttl, redistest.NoCompute[string]); err != nil {
			t.Fatalf("Fetch(%q): %v", key, err)
		}
		return dogpile.NearHas(c, key)
	})
}

// freeze pauses s (resumed when the test ends, before its Caches close)
// and waits until a Fetch on c of a key it never read fails with
// ErrUnavailable: the client's circuit is open.
func freeze(t *testing.T, s *redistest.Server, c *dogpile.Cache[string]) {
	t.Helper()
	s.Pause()
	t.Cleanup(s.Resume)
	redistest.Eventually(t, "the circuit to open", func() bool {
		_, err := c.Fetch(t.Context(), "never-read", time.Minute, redistest.NoCompute[string])
		return errors.Is(err, dogpile.ErrUnavailable)
	})
}

// TestStaleIfDownServesKeptCopy: while Redis is frozen, a Cache
// WithNearCache, WithStale and WithStaleIfDown answers a key it held with
// its copy (a stale hit, counted), also WithComputeWhenDown (compute is not
// called); without WithStaleIfDown, or without WithStale, Fetch fails with
// ErrUnavailable. Once Redis answers again, a value written meanwhile is
// what Fetch returns, never the copy.
func TestStaleIfDownServesKeptCopy(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := frozenClient(t, s)
	near := []dogpile.Option{dogpile.WithNearCache(10), dogpile.WithNearTest()}
	cases := []struct {
		name  string
		opts  []dogpile.Option
		serve bool
	}{
		{"all three", []dogpile.Option{dogpile.WithStale(time.Minute), dogpile.WithStaleIfDown()}, true},
		{"WithComputeWhenDown", []dogpile.Option{dogpile.WithStale(time.Minute), dogpile.WithStaleIfDown(), dogpile.WithComputeWhenDown()}, true},
		{"no WithStaleIfDown", []dogpile.Option{dogpile.WithStale(time.Minute)}, false},
		{"no WithStale", []dogpile.Option{dogpile.WithStaleIfDown()}, false},
	}
	caches := make([]*dogpile.Cache[string], len(cases))
	for i, tc := range cases {
		opts := append([]dogpile.Option{dogpile.WithPrefix(tc.name + ":")}, append(near, tc.opts...)...)
		caches[i] = dogpile.New[string](rdb, opts...)
		t.Cleanup(func() { _ = caches[i].Close() })
		warmNear(t, caches[i], "k", time.Minute, "v1")
	}
	freeze(t, s, caches[len(caches)-1])
	for i, tc := range cases {
		c := caches[i]
		if !tc.serve {
			if v, err := c.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[string]); !errors.Is(err, dogpile.ErrUnavailable) {
				t.Errorf("%s: Fetch = %q, %v; want ErrUnavailable", tc.name, v, err)
			}
			continue
		}
		// Tracking's loss may be seen after the circuit opened: until
		// then nothing is kept, and Fetch fails.
		redistest.Eventually(t, tc.name+": the kept copy served", func() bool {
			v, err := c.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[string])
			if err == nil && v != "v1" {
				t.Fatalf("%s: Fetch = %q; want the kept copy v1", tc.name, v)
			}
			return err == nil
		})
		if st := c.Stats(); st.StaleIfDown == 0 || st.Stale == 0 {
			t.Errorf("%s: Stats StaleIfDown = %d, Stale = %d; want both counted", tc.name, st.StaleIfDown, st.Stale)
		}
		if tc.name == "WithComputeWhenDown" {
			// FetchMany is unchanged by WithStaleIfDown: it computes
			// without Redis, and serves no kept copy.
			kept := c.Stats().StaleIfDown
			got, err := c.FetchMany(t.Context(), []string{"k"}, time.Minute, func(context.Context, []string) (map[string]string, error) {
				return map[string]string{"k": "computed"}, nil
			})
			if err != nil || got["k"] != "computed" {
				t.Errorf("%s: FetchMany = %v, %v; want k computed, not the kept copy", tc.name, got, err)
			}
			if n := c.Stats().StaleIfDown; n != kept {
				t.Errorf("%s: FetchMany counted %d StaleIfDown; want none", tc.name, n-kept)
			}
		}
	}

	// Back: once a write through the same client has gone through (the
	// circuit closed), the copy is never served again, tracking up or not.
	s.Resume()
	writer := dogpile.New[string](rdb, dogpile.WithPrefix("all three:"), dogpile.WithStale(time.Minute))
	t.Cleanup(func() { _ = writer.Close() })
	redistest.Eventually(t, "a Set once Redis is back", func() bool {
		return writer.Set(context.Background(), "k", "v2", time.Minute) == nil
	})
	c := caches[0]
	redistest.Eventually(t, "v2 read after the Set", func() bool {
		v, err := c.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[string])
		if err == nil && v != "v2" {
			t.Fatalf("Fetch after Redis came back = %q; want v2", v)
		}
		return err == nil
	})
	redistest.Eventually(t, "tracking up, nothing kept", func() bool {
		x := dogpile.NearIndex(c)
		return x.Up() && !x.Kept()
	})
	if v := dogpile.FetchNear(t, c, "k"); v != "v2" {
		t.Errorf("near hit after tracking came back = %q; want v2", v)
	}
}

// TestStaleIfDownStalePoint: a kept copy is served while Redis is frozen
// only up to its stale point (TTL plus stale window); a key with a longer
// one is still served then.
func TestStaleIfDownStalePoint(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	const ttl, stale = 1 * time.Second, time.Second
	s := redistest.StartServer(t)
	c := dogpile.New[string](frozenClient(t, s), prefix(t), dogpile.WithNearCache(10), dogpile.WithNearTest(),
		dogpile.WithStale(stale), dogpile.WithStaleIfDown())
	t.Cleanup(func() { _ = c.Close() })
	warmNear(t, c, "long", time.Hour, "l")
	warmNear(t, c, "short", ttl, "s")
	stalePoint := time.Now().Add(ttl + stale) // after its expiry in Redis: the Set returned before

	freeze(t, s, c)
	time.Sleep(time.Until(stalePoint) + 200*time.Millisecond)
	redistest.Eventually(t, "the long key's copy served", func() bool {
		_, err := c.Fetch(t.Context(), "long", time.Hour, redistest.NoCompute[string])
		return err == nil
	})
	before := c.Stats().StaleIfDown
	if v, err := c.Fetch(t.Context(), "short", ttl, redistest.NoCompute[string]); !errors.Is(err, dogpile.ErrUnavailable) {
		t.Errorf("Fetch past the stale point = %q, %v; want ErrUnavailable", v, err)
	}
	if !dogpile.NearHas(c, "short") {
		t.Error("the short key's copy was not kept: the check above proves nothing")
	}
	if got := c.Stats().StaleIfDown; got != before {
		t.Errorf("StaleIfDown went from %d to %d on a copy past its stale point", before, got)
	}
}

// TestStaleIfDownNotAfterCircuitClosed: once the circuit has closed, a
// copy kept before is not served in a later outage, even with tracking
// still down (held down here), for Redis may have changed the key in
// between.
func TestStaleIfDownNotAfterCircuitClosed(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := frozenClient(t, s)
	c := dogpile.New[string](rdb, prefix(t), dogpile.WithNearCache(10), dogpile.WithNearTest(),
		dogpile.WithStale(time.Minute), dogpile.WithStaleIfDown())
	t.Cleanup(func() { _ = c.Close() })
	// Tracking is held down once the copy is warm, not before: a first
	// session that fails under load must be able to start again.
	gate, held := make(chan struct{}), new(atomic.Bool)
	dogpile.Tracker(c).BeforeSession = func() {
		if held.Load() {
			<-gate
		}
	}
	t.Cleanup(func() { close(gate) })
	warmNear(t, c, "k", time.Minute, "v1")
	held.Store(true)
	freeze(t, s, c)
	redistest.Eventually(t, "the kept copy served", func() bool {
		_, err := c.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[string])
		return err == nil
	})
	s.Resume()
	writer := dogpile.New[string](rdb, prefix(t), dogpile.WithStale(time.Minute))
	t.Cleanup(func() { _ = writer.Close() })
	redistest.Eventually(t, "a Set once Redis is back", func() bool {
		return writer.Set(context.Background(), "k", "v2", time.Minute) == nil
	})
	freeze(t, s, c)
	if !dogpile.NearIndex(c).Kept() || !dogpile.NearHas(c, "k") {
		t.Fatal("the copy is no longer kept: the check below proves nothing")
	}
	if v, err := c.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[string]); !errors.Is(err, dogpile.ErrUnavailable) {
		t.Errorf("Fetch in a second outage = %q, %v; want ErrUnavailable", v, err)
	}
}
