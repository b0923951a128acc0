package dogpile

// Counting the commands a client sends: what a Fetch costs in round trips.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// commandCounter records the names of the commands a client sends, alone
// or in pipelines, but not the handshake of a new pooled connection.
type commandCounter struct {
	mu    sync.Mutex
	names []string
}

// countCommands adds a hook to rdb that records its commands into the
// counter it returns. Pub/sub commands go on the separate wake-up
// connection and are not seen by hooks.
func countCommands(rdb redis.UniversalClient) *commandCounter {
	h := &commandCounter{}
	rdb.AddHook(redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			h.record(cmd)
			return next(ctx, cmd)
		},
		Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			h.record(cmds...)
			return next(ctx, cmds)
		},
	})
	return h
}

func (h *commandCounter) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if !redistest.IsHandshake(c) {
			h.names = append(h.names, c.Name())
		}
	}
}

// take returns the names recorded since the last take.
func (h *commandCounter) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names
	h.names = nil
	return n
}

// loadScripts loads every script on every server, so that counts do not
// include the one-off NOSCRIPT+EVAL of a script's first use.
func loadScripts(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := t.Context()
	load := func(ctx context.Context, c *redis.Client) error {
		for _, s := range []*redis.Script{fetchScript, fetchManyScript, storeScript, failScript, releaseScript, extendScript, setScript, deleteScript} {
			if err := s.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Client:
		err = load(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// testCommandsPerFetch counts what a holder, a hit and a waiter send.
func testCommandsPerFetch(t *testing.T, b redistest.Backend) {
	hrdb, wrdb := b.Client(t), b.Client(t)
	loadScripts(t, hrdb)
	hcount, wcount := countCommands(hrdb), countCommands(wrdb)
	holder := New[int](hrdb, prefix(t))
	waiter := New[int](wrdb, prefix(t))

	// Winner: GET, fetch script (takes the lock), store script.
	if _, err := holder.Fetch(t.Context(), "w", time.Minute, func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	if got := hcount.take(); len(got) > 3 {
		t.Errorf("winner sent %d commands %v; want at most 3", len(got), got)
	}
	// Hit: one GET.
	if _, err := waiter.Fetch(t.Context(), "w", time.Minute, nil2[int]); err != nil {
		t.Fatal(err)
	}
	if got := wcount.take(); len(got) != 1 {
		t.Errorf("hit sent %d commands %v; want 1", len(got), got)
	}
	// Waiter: GET, fetch script (busy), fetch script after subscribing
	// (wait); the value comes with the wake-up.
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) { return 2, nil })
	close(release)
	if r := <-hres; r.err != nil {
		t.Fatal(r.err)
	}
	if r := <-wres; r.err != nil || r.v != 2 {
		t.Fatalf("waiter = %v, %v", r.v, r.err)
	}
	if got := wcount.take(); len(got) > 3 {
		t.Errorf("waiter sent %d commands %v; want at most 3", len(got), got)
	}
}
