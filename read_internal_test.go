package dogpile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
	"github.com/dogpile-go/dogpile/internal/servertime"
)

// batchedServer starts a server and a client with go-redis's default
// options whose every GET queues for a pipeline (Gets.SetDirect), and
// records the pipelines it sends.
func batchedServer(t *testing.T) (*redistest.Server, *redis.Client, *pipedGets) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	roundtrip.GetsOf(rdb).SetDirect(0) // every call queues for a pipeline
	piped := &pipedGets{}
	rdb.AddHook(piped.hook())
	return srv, rdb, piped
}

// pipedGets records the sizes of the pipelines of GETs a client sends.
type pipedGets struct {
	mu    sync.Mutex
	sizes []int
}

func (p *pipedGets) hook() redistest.Hook {
	return redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if cmds[0].Name() == "get" {
			p.mu.Lock()
			p.sizes = append(p.sizes, len(cmds))
			p.mu.Unlock()
		}
		return next(ctx, cmds)
	}}
}

func (p *pipedGets) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := 0
	for _, n := range p.sizes {
		t += n
	}
	return t
}

func (p *pipedGets) most() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := 0
	for _, n := range p.sizes {
		m = max(m, n)
	}
	return m
}

// TestHitsShareRoundTrips: concurrent hits of different keys share a
// pipeline, and each caller gets its own key's value; a key of another
// type answers WRONGTYPE to its caller alone, which reads it as a miss and
// computes. With the server paused while they queue, the calls of a queue
// go out together.
func TestHitsShareRoundTrips(t *testing.T) {
	srv, rdb, piped := batchedServer(t)
	ctx := t.Context()
	c := New[string](rdb, prefix(t))
	const n = 12
	for i := range n {
		if err := c.Set(ctx, fmt.Sprint("k", i), fmt.Sprint("v", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.RPush(ctx, c.valueKey("list"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	fetch := func(key, want string) {
		wg.Go(func() {
			v, err := c.Fetch(ctx, key, time.Minute, func(context.Context) (string, error) {
				return "", errors.New("computed: the value was cached")
			})
			switch {
			case want == "" && (err == nil || !strings.Contains(err.Error(), "computed")):
				t.Errorf("Fetch(%s) = %q, %v; want a miss that computes (WRONGTYPE, to this caller alone)", key, v, err)
			case want != "" && (err != nil || v != want):
				t.Errorf("Fetch(%s) = %q, %v; want %q", key, v, err, want)
			}
		})
	}
	fetch("k0", "v0") // the first pipeline, held by the pause
	redistest.Eventually(t, "the first GET sent", func() bool { return piped.most() == 1 })
	for i := 1; i < n; i++ {
		fetch(fmt.Sprint("k", i), fmt.Sprint("v", i))
	}
	fetch("list", "")
	redistest.Eventually(t, "the GETs sent or queued", func() bool { q, _ := c.gets.Queued(""); return piped.total()+q == n+1 })
	srv.Resume()
	wg.Wait()
	if m := piped.most(); m < roundtrip.PipelineMin {
		t.Errorf("largest pipeline of GETs: %d; want %d or more: the calls queued behind the first share pipelines", m, roundtrip.PipelineMin)
	}
}

// TestBatchedHitLeavesOnItsDeadline: a caller whose GET waits for a
// pipeline returns at its context's deadline, on a client with go-redis's
// default options (no ContextTimeoutEnabled: a GET sent alone would wait
// for go-redis's read timeout, 5 s in v9.23), whether
// its GET was sent (into a stopped server) or still queued; the queued one
// is never sent. The Cache serves once the server is back.
func TestBatchedHitLeavesOnItsDeadline(t *testing.T) {
	srv, rdb, piped := batchedServer(t)
	ctx := t.Context()
	c := New[string](rdb, prefix(t))
	for _, k := range []string{"sent", "queued"} {
		if err := c.Set(ctx, k, "v", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	srv.Pause()
	defer srv.Resume()
	const deadline = time.Second
	var wg sync.WaitGroup
	fetch := func(key string) {
		wg.Go(func() {
			fctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			_, err := c.Fetch(fctx, key, time.Minute, func(context.Context) (string, error) { return "computed", nil })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Fetch(%s) = %v; want context.DeadlineExceeded", key, err)
			}
			if took := time.Since(start); took > deadline+time.Second {
				t.Errorf("Fetch(%s) returned after %v; want about its deadline, %v", key, took, deadline)
			}
		})
	}
	fetch("sent")
	redistest.Eventually(t, "the first GET sent", func() bool { return piped.total() == 1 })
	fetch("queued")
	redistest.Eventually(t, "the second GET queued", func() bool { q, _ := c.gets.Queued(""); return q == 1 })
	wg.Wait()
	srv.Resume()
	if v, err := c.Fetch(ctx, "queued", time.Minute, func(context.Context) (string, error) { return "computed", nil }); err != nil || v != "v" {
		t.Errorf("Fetch after the pause = %q, %v; want v", v, err)
	}
	if n := piped.total(); n != 2 {
		t.Errorf("%d GETs sent in pipelines; want 2 (the first, and the last Fetch's): the one queued when its caller left is not sent", n)
	}
}

// TestHitsShareRoundTripsCluster: on a Cluster, batched hits go in a lane
// per master, each caller gets its own key's value.
func TestHitsShareRoundTripsCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	roundtrip.GetsOf(rdb).SetDirect(0) // every call queues for a pipeline
	ctx := t.Context()
	c := New[string](rdb, prefix(t))
	const n = 60
	for i := range n {
		if err := c.Set(ctx, fmt.Sprint("k", i), fmt.Sprint("v", i), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for round := range 5 {
		for i := range n {
			wg.Go(func() {
				key := fmt.Sprint("k", (i+round)%n)
				v, err := c.Fetch(ctx, key, time.Minute, func(context.Context) (string, error) {
					return "", errors.New("computed: the value was cached")
				})
				if want := "v" + key[1:]; err != nil || v != want {
					t.Errorf("Fetch(%s) = %q, %v; want %q", key, v, err, want)
				}
			})
		}
		wg.Wait()
	}
	lanes := 0
	for _, addr := range cl.Addrs() {
		if _, ok := c.gets.Queued(addr); ok {
			lanes++
		}
	}
	if lanes != 3 {
		t.Errorf("%d lanes of GETs; want one per master, 3", lanes)
	}
}

// TestBatchedHitRefusedByHook: a pipeline that a client's hook refuses
// without running it gives each of its GETs the hook's error, as a GET
// refused alone gets: not an empty reply, which would read as bytes that
// do not decode and start a compute.
func TestBatchedHitRefusedByHook(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	roundtrip.GetsOf(rdb).SetDirect(0) // every call queues for a pipeline
	ctx := t.Context()
	c := New[string](rdb, prefix(t))
	if err := c.Set(ctx, "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused by a hook")
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		return refused
	}})
	computes := 0
	_, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (string, error) {
		computes++
		return "computed", nil
	})
	if !errors.Is(err, refused) || computes != 0 || c.Stats().DecodeErrors != 0 {
		t.Errorf("Fetch through a refused pipeline = %v, %d computes, %d decode errors; want the hook's error, none, none",
			err, computes, c.Stats().DecodeErrors)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, refused) {
		t.Errorf("Get through a refused pipeline = %v; want the hook's error", err)
	}
}

// TestGetBatcherGoesWithItsClient: a client's batcher of GETs, lanes and
// all, goes once the program drops the client (see perclient.Map).
func TestGetBatcherGoesWithItsClient(t *testing.T) {
	srv := redistest.StartServer(t)
	var clients []weak.Pointer[redis.Client]
	func() {
		for range 3 {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			clients = append(clients, weak.Make(rdb))
			c := New[string](rdb, prefix(t))
			c.gets.SetDirect(0) // every call queues for a pipeline
			if _, err := c.Fetch(t.Context(), "k", time.Minute, func(context.Context) (string, error) { return "v", nil }); err != nil {
				t.Fatal(err)
			}
			if _, ok := c.gets.Queued(""); !ok {
				t.Fatal("no lane: the GET did not batch")
			}
			c.Close()
			_ = rdb.Close()
		}
	}()
	redistest.Collected(t, "the closed clients to go (their batchers of GETs must not keep them)", func() bool {
		for _, p := range clients {
			if p.Value() != nil {
				return false
			}
		}
		return true
	})
}

// A hit with freshness options reads the remaining TTL from the entry,
// stamped in the server's clock by the store script: one GET, no PTTL
// (read.go).

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
			if _, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("v")); err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "s", "w", time.Hour); err != nil {
				t.Fatal(err)
			}
			clockReady(t, c)
			cmds := redistest.RecordCommands(rdb)
			for _, k := range []string{"k", "s"} {
				if _, err := c.Fetch(ctx, k, time.Hour, redistest.Constant("x")); err != nil {
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
	if _, err := c.Fetch(ctx, "k", 300*time.Millisecond, redistest.Constant("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("x")); err != nil || c.Stats().Stale != 0 {
		t.Fatalf("a fresh hit: %v, Stats %+v; want not stale", err, c.Stats())
	}
	time.Sleep(350 * time.Millisecond) // the TTL must run out on the server's clock
	cmds := redistest.RecordCommands(rdb)
	if v, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("v2")); v != "v1" || err != nil {
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
	if v, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("v2")); v != "v1" || err != nil {
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
		if _, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("x")); err != nil {
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
	if _, err := c.Fetch(t.Context(), "k", time.Hour, redistest.Constant("v")); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the clock to be checked", func() bool {
		c.readyClock()
		return c.fresh.Clock.Refused()
	})
	b.Advance(time.Hour + time.Second)
	cmds := redistest.RecordCommands(rdb)
	if _, err := c.Fetch(t.Context(), "k", time.Hour, redistest.Constant("x")); err != nil {
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
		b := binary.BigEndian.AppendUint64([]byte{entry.Magic0, entry.Magic1, entry.FormatDeadline}, d)
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
		if got := entry.Deadline(tc.b); got != tc.want {
			t.Errorf("entry.Deadline(%q) = %d; want %d", tc.b, got, tc.want)
		}
	}
}
