package dogpile

// A hit with freshness options reads the remaining TTL from the entry,
// stamped in the server's clock by the store script: one GET, no PTTL
// (read.go).

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/servertime"
)

// noTime drops the TIME calls of the clock's sampler, which may run at any
// moment, from names.
func noTime(names []string) []string {
	return slices.DeleteFunc(names, func(n string) bool { return n == "time" })
}

// clockReady waits until c reads remaining TTLs from entries.
func clockReady[T any](t *testing.T, c *Cache[T]) {
	t.Helper()
	redistest.Eventually(t, "the servers' clock to be sampled", func() bool {
		return c.readyClock()
	})
}

func TestFreshReadOneCommand(t *testing.T) {
	cases := []struct {
		name string
		opt  Option
	}{
		{"stale", WithStale(time.Hour)},
		{"early", WithEarlyRefresh(1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			rdb := redistest.StartServer(t).Client(t)
			c := New[string](rdb, prefix(t), tc.opt)
			if _, err := c.Fetch(ctx, "k", time.Hour, constant("v")); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "s", "w", time.Hour); err != nil {
				t.Fatal(err)
			}
			clockReady(t, c)
			cmds := redistest.RecordCommands(rdb)
			for _, k := range []string{"k", "s"} {
				if _, err := c.Fetch(ctx, k, time.Hour, constant("x")); err != nil {
					t.Fatal(err)
				}
				if got := noTime(cmds.Take()); !slices.Equal(got, []string{"get"}) {
					t.Errorf("a hit of %q sent %v; want one GET", k, got)
				}
			}
			if _, err := c.FetchMany(ctx, []string{"k", "s"}, time.Hour, func(context.Context, []string) (map[string]string, error) {
				return nil, nil
			}); err != nil {
				t.Fatal(err)
			}
			if got := noTime(cmds.Take()); !slices.Equal(got, []string{"mget"}) {
				t.Errorf("FetchMany of two hits sent %v; want one MGET", got)
			}
		})
	}
}

// TestFreshReadStaleFromEntry: a value past its TTL is known stale from its
// entry alone, and refreshed.
func TestFreshReadStaleFromEntry(t *testing.T) {
	ctx := t.Context()
	rdb := redistest.StartServer(t).Client(t)
	c := New[string](rdb, prefix(t), WithStale(time.Hour))
	clockReady(t, c)
	if _, err := c.Fetch(ctx, "k", 300*time.Millisecond, constant("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "k", time.Hour, constant("x")); err != nil || c.Stats().Stale != 0 {
		t.Fatalf("a fresh hit: %v, Stats %+v; want not stale", err, c.Stats())
	}
	time.Sleep(350 * time.Millisecond) // the TTL must run out on the server's clock
	cmds := redistest.RecordCommands(rdb)
	if v, err := c.Fetch(ctx, "k", time.Hour, constant("v2")); v != "v1" || err != nil {
		t.Fatalf("Fetch = %q, %v; want the stale v1", v, err)
	}
	if got := noTime(cmds.Take()); len(got) == 0 || got[0] != "get" || slices.Contains(got, "pttl") {
		t.Errorf("the stale hit sent %v; want a GET and no PTTL", got)
	}
	settle(t, c)
	if s := c.Stats(); s.Stale != 1 || s.Refreshes != 1 {
		t.Errorf("Stats = %+v; want one stale hit, one refresh", s)
	}
	if v, err := c.Get(ctx, "k"); v != "v2" || err != nil {
		t.Errorf("Get after the refresh = %q, %v; want v2", v, err)
	}
}

// TestFreshReadInvalidatedStale: InvalidateTag with a stale window shortens
// a value's TTL to the window, and its entry's expiry with it.
func TestFreshReadInvalidatedStale(t *testing.T) {
	ctx := t.Context()
	rdb := redistest.StartServer(t).Client(t)
	c := New[string](rdb, prefix(t), WithStale(time.Minute))
	clockReady(t, c)
	if err := c.SetTagged(ctx, "k", "v1", time.Hour, "t"); err != nil {
		t.Fatal(err)
	}
	if err := c.InvalidateTag(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	cmds := redistest.RecordCommands(rdb)
	block := make(chan struct{})
	refresh := func(context.Context) (string, error) { <-block; return "v2", nil }
	v, err := c.Fetch(ctx, "k", time.Hour, refresh)
	close(block)
	settle(t, c)
	if v != "v1" || err != nil {
		t.Fatalf("Fetch = %q, %v; want the stale v1", v, err)
	}
	if s := c.Stats(); s.Stale != 1 {
		t.Errorf("Stats = %+v; want the invalidated value served stale", s)
	}
	if got := noTime(cmds.Take()); len(got) == 0 || got[0] != "get" || slices.Contains(got, "pttl") {
		t.Errorf("the hit sent %v; want a GET and no PTTL", got)
	}
}

// TestFreshReadForeignEntry: an entry with no expiry in it (written by a
// Cache without freshness options) costs a PTTL, and the next reads
// pipeline one until an entry has an expiry again.
func TestFreshReadForeignEntry(t *testing.T) {
	ctx := t.Context()
	rdb := redistest.StartServer(t).Client(t)
	plain := New[string](rdb, prefix(t))
	c := New[string](rdb, prefix(t), WithStale(time.Minute))
	clockReady(t, c)
	if err := plain.Set(ctx, "k", "v1", time.Second); err != nil { // stale at once for c
		t.Fatal(err)
	}
	cmds := redistest.RecordCommands(rdb)
	if v, err := c.Fetch(ctx, "k", time.Hour, constant("v2")); v != "v1" || err != nil {
		t.Fatalf("Fetch = %q, %v; want v1", v, err)
	}
	if got := noTime(cmds.Take()); len(got) < 2 || !slices.Equal(got[:2], []string{"get", "pttl"}) {
		t.Errorf("the hit sent %v; want a GET, then a PTTL", got)
	}
	settle(t, c)
	cmds.Take() // the refresh's
	if s := c.Stats(); s.Stale != 1 {
		t.Errorf("Stats = %+v; want v1 served stale (its PTTL is below the stale window)", s)
	}
	// The refresh wrote an entry with an expiry: one pipelined read finds
	// it, and the next is a GET alone.
	for _, want := range [][]string{{"get", "pttl"}, {"get"}} {
		if _, err := c.Fetch(ctx, "k", time.Hour, constant("x")); err != nil {
			t.Fatal(err)
		}
		if got := noTime(cmds.Take()); !slices.Equal(got, want) {
			t.Errorf("a hit sent %v; want %v", got, want)
		}
	}
}

// TestFreshReadMiniredis: miniredis expires keys only by FastForward, not
// with its clock: the entry's expiry cannot be trusted, and every hit
// pipelines a PTTL.
func TestFreshReadMiniredis(t *testing.T) {
	b := redistest.Miniredis(t)
	rdb := b.Client(t)
	c := New[string](rdb, prefix(t), WithStale(time.Minute))
	if _, err := c.Fetch(t.Context(), "k", time.Hour, constant("v")); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the clock to be checked", func() bool {
		c.readyClock()
		return c.fresh.clock.Refused()
	})
	b.Advance(time.Hour + time.Second)
	cmds := redistest.RecordCommands(rdb)
	if _, err := c.Fetch(t.Context(), "k", time.Hour, constant("x")); err != nil {
		t.Fatal(err)
	}
	if got := noTime(cmds.Take()); len(got) < 2 || !slices.Equal(got[:2], []string{"get", "pttl"}) {
		t.Errorf("the hit sent %v; want a GET and a PTTL", got)
	}
	settle(t, c)
	if s := c.Stats(); s.Stale != 1 {
		t.Errorf("Stats = %+v; want the value past FastForward served stale", s)
	}
}

// TestDeadlineOf: an entry's expiry is read only from a version 3 header,
// and one too far off to count in ns (a TTL of centuries) is unknown.
func TestDeadlineOf(t *testing.T) {
	e := func(d uint64) []byte {
		b := binary.BigEndian.AppendUint64([]byte{magic0, magic1, formatDeadline}, d)
		return append(b, 0, 0, 0, 0xc0)
	}
	cases := []struct {
		b    []byte
		want int64
	}{
		{e(1_800_000_000_000), 1_800_000_000_000},
		{e(uint64(servertime.MaxDeadline)), servertime.MaxDeadline},
		{e(uint64(servertime.MaxDeadline) + 1), 0},
		{e(1 << 63), 0},
		{[]byte("dp\x02\x00\x00\x00\xc0"), 0},
		{[]byte("dp\x03\x00"), 0},
	}
	for _, tc := range cases {
		if got := deadlineOf(tc.b); got != tc.want {
			t.Errorf("deadlineOf(%q) = %d; want %d", tc.b, got, tc.want)
		}
	}
}
