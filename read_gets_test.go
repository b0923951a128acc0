package dogpile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

// batchedServer starts a server and a client with go-redis's default
// options whose every GET queues for a pipeline (roundtrip.SetDirect), and
// records the pipelines it sends.
func batchedServer(t *testing.T) (*redistest.Server, *redis.Client, *pipedGets) {
	roundtrip.SetDirect(t, 0) // every call queues for a pipeline
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
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
	roundtrip.SetDirect(t, 0) // every call queues for a pipeline
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
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
	roundtrip.SetDirect(t, 0) // every call queues for a pipeline
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
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
	roundtrip.SetDirect(t, 0) // every call queues for a pipeline
	srv := redistest.StartServer(t)
	var clients []weak.Pointer[redis.Client]
	func() {
		for range 3 {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			clients = append(clients, weak.Make(rdb))
			c := New[string](rdb, prefix(t))
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
