package dogpile_test

// The near tier across processes: another process's writes, and a
// cluster's failover under a process that serves from memory.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// fromOther is what procSet stores under "k".
const fromOther = "from the other process"

// procSet, the other process of TestNearCacheOtherProcess: it Sets "k" and
// Deletes "j" through its own client and Cache, then exits.
func procSet(p *proc) {
	p.ready()
	ctx := context.Background()
	p.check("", "", p.c.Set(ctx, "k", fromOther, time.Minute))
	p.check("", "", p.c.Delete(ctx, "j"))
}

// TestNearCacheOtherProcess: process A serves "k" and "j" from its near
// tier; another process (this binary re-executed) Sets "k" and Deletes
// "j". A's Fetch calls then return the new value and the compute's, and
// the new value is served from memory again.
func TestNearCacheOtherProcess(t *testing.T) {
	onFleets(t, func(t *testing.T, addrs []string, rdb redis.UniversalClient) {
		const prefix = "nearproc:"
		a := dogpile.New[string](rdb, dogpile.WithPrefix(prefix), dogpile.WithNearCache(100), dogpile.WithNearTest())
		t.Cleanup(func() { _ = a.Close() })
		ctx := t.Context()
		for _, k := range []string{"k", "j"} {
			if err := a.Set(ctx, k, "v1", time.Minute); err != nil {
				t.Fatal(err)
			}
			dogpile.FetchNear(t, a, k)
		}
		invalidations := a.Stats().NearInvalidations
		for _, r := range results(t, goChildren(t, 1, "set", addrs, prefix)) {
			if r.Values != 2 {
				t.Fatalf("the other process: %d of 2 writes done", r.Values)
			}
		}
		// The other process has exited: its writes are in Redis, and their
		// invalidations on their way.
		for k, want := range map[string]string{"k": fromOther, "j": "computed"} {
			redistest.Eventually(t, "the other process's write of "+k, func() bool {
				v, err := a.Fetch(ctx, k, time.Minute, redistest.Constant("computed"))
				if err != nil {
					t.Fatal(err)
				}
				return v == want
			})
		}
		if got := a.Stats().NearInvalidations; got < invalidations+2 {
			t.Errorf("invalidations received: %d; want at least %d", got-invalidations, 2)
		}
		if v := dogpile.FetchNear(t, a, "k"); v != fromOther {
			t.Fatalf("near hit after the write = %q; want %q", v, fromOther)
		}
	})
}

// The near tier of a process across a cluster's failover: process B writes
// through the new master while A serves from memory.

// TestNearCacheClusterFailover: after a graceful failover of a master
// whose keys process A serves from its near tier, A's tracker follows the
// slots to the new master by itself, though A serves only near hits and so
// never meets a MOVED. With the old master cut off from the new one's
// writes, its invalidations stop: a tracker still on it would serve the
// old values for ever; A converges on the values B writes after the
// failover, and never returns to the old ones.
func TestNearCacheClusterFailover(t *testing.T) {
	f := startFailover(t)
	cl, a, b, old, replica, keys := f.cl, f.a, f.b, f.old, f.replica, f.keys
	ctx := t.Context()
	stop := serveNear(t, a, keys, nil) // A keeps serving, from its near tier
	cl.Failover(t, replica)
	replica.CutReplication(t)
	for _, k := range keys {
		if err := b.Set(ctx, k, "v2", time.Minute); err != nil { // B follows the MOVED
			t.Fatal(err)
		}
	}
	if linkUp(t, old) {
		t.Fatal("the old master still replicates the new one")
	}
	for _, k := range keys {
		redistest.Eventually(t, "A to serve the new value of "+k, func() bool { return dogpile.FetchValue(t, a, k) == "v2" })
	}
	stop()
	for _, k := range keys {
		if v := dogpile.FetchNear(t, a, k); v != "v2" {
			t.Fatalf("near hit on %s after the failover = %q; want v2", k, v)
		}
		for range 20 {
			if v := dogpile.FetchValue(t, a, k); v != "v2" {
				t.Fatalf("Fetch(%q) after A served v2 = %q", k, v)
			}
		}
	}
	if n, m := trackingConns(t, replica, dogpile.Tracker(a).Config().Readers), trackingConns(t, old, dogpile.Tracker(a).Config().Readers); n != 1 || m != 0 {
		t.Errorf("tracking connections on the new master %d, on the old %d; want 1 and 0", n, m)
	}
}

// TestNearCacheClusterMasterKilled: when a master is killed (SIGKILL), A's
// tracking connection to it drops and the tier is flushed; from then until
// the master's replica is promoted, A serves no near hit at all; after the
// promotion A tracks the new master and serves near hits again, of the
// values B writes there.
func TestNearCacheClusterMasterKilled(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	f := startFailover(t)
	cl, a, bc, b, old, replica, keys := f.cl, f.a, f.bc, f.b, f.old, f.replica, f.keys
	ctx := t.Context()
	flushes := a.Stats().NearFlushes
	role := replica.Client(t)
	var early, fetches atomic.Int64 // near hits before the promotion; Fetches
	promoted := false               // serveNear's goroutine's own
	old.Kill()
	// Until the flush, the tier may serve the values it holds: nothing can
	// write them, and their master's death reaches A a moment later.
	redistest.Eventually(t, "the flush", func() bool { return a.Stats().NearFlushes > flushes })
	stop := serveNear(t, a, keys, func(near bool) {
		fetches.Add(1)
		if !promoted {
			// Asked after the Fetch: a near hit counts as early only if the
			// replica was not a master even after it.
			promoted = strings.Contains(role.Info(ctx, "replication").Val(), "role:master")
		}
		if near && !promoted {
			early.Add(1)
		}
	})
	cl.AwaitPromotion(t, replica)
	stop()
	t.Logf("%d Fetches between the flush and the promotion", fetches.Load())
	if n := early.Load(); n != 0 {
		t.Errorf("%d near hits between the flush and the promotion (of %d Fetches)", n, fetches.Load())
	}
	redistest.Eventually(t, "B's write to the new master", func() bool {
		bc.ReloadState(ctx) // go-redis reloads the slots by itself only after a MOVED, or a minute
		return b.Set(ctx, keys[0], "v2", time.Minute) == nil
	})
	for _, k := range keys {
		if err := b.Set(ctx, k, "v2", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		redistest.Eventually(t, "A to serve the new value of "+k, func() bool {
			v, err := a.Fetch(ctx, k, time.Minute, redistest.NoCompute[string]) // A's client may not know the new master yet
			return err == nil && v == "v2"
		})
		if v := dogpile.FetchNear(t, a, k); v != "v2" {
			t.Fatalf("near hit on %s after the promotion = %q; want v2", k, v)
		}
	}
	if n := trackingConns(t, replica, dogpile.Tracker(a).Config().Readers); n != 1 {
		t.Errorf("tracking connections on the promoted replica: %d; want 1", n)
	}
}

// A failoverFleet is a 3-master cluster with a replica each, process A
// (a near-cached Cache) serving keys of master 0 from memory, and a writer
// B on a client of its own.
type failoverFleet struct {
	cl           *redistest.Cluster
	a, b         *dogpile.Cache[string]
	bc           *redis.ClusterClient
	old, replica *redistest.Server // master 0 and its replica
	keys         []string          // 5 keys of master 0, "v1", near-cached by A
}

func startFailover(t *testing.T) failoverFleet {
	t.Helper()
	f := failoverFleet{cl: redistest.StartClusterReplicas(t, 3, 1)}
	f.a = dogpile.NewNearCache[string](t, f.cl.Client(t), 1000)
	f.bc = f.cl.Client(t)
	f.b = dogpile.New[string](f.bc, prefix(t))
	f.old, f.replica = f.cl.Nodes[0], f.cl.Replicas[0][0]
	f.keys = keysOn(t, f.b, f.bc, f.old, 5)
	for _, k := range f.keys {
		if err := f.b.Set(t.Context(), k, "v1", time.Minute); err != nil {
			t.Fatal(err)
		}
		dogpile.FetchNear(t, f.a, k)
	}
	return f
}

// keysOn returns n keys of c whose values live in the slots s owns.
func keysOn[T any](t *testing.T, c *dogpile.Cache[T], cc *redis.ClusterClient, s *redistest.Server, n int) []string {
	t.Helper()
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprint("k", i)
		m, err := cc.MasterForKey(t.Context(), dogpile.KeysOf(c, k).Value)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == s.Addr() {
			keys = append(keys, k)
		}
	}
	return keys
}

// serveNear Fetches keys from c in a loop until the returned stop is
// called, as a process under load would: its tracker never goes idle,
// even while a Fetch waits for a dead master. after, if not nil, is called
// after each Fetch, told whether it was a near hit. Errors are ignored.
func serveNear(t *testing.T, c *dogpile.Cache[string], keys []string, after func(near bool)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, k := range keys {
				hits := c.Stats().NearHits
				_, _ = c.Fetch(ctx, k, time.Minute, redistest.Constant("computed"))
				if after != nil {
					after(c.Stats().NearHits > hits)
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	wg.Go(func() { // other callers' Fetches, which find the tier off
		for ctx.Err() == nil {
			dogpile.Tracker(c).Use(near.Now())
			time.Sleep(10 * time.Millisecond)
		}
	})
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

// linkUp reports whether replica's link to its master is up.
func linkUp(t *testing.T, replica *redistest.Server) bool {
	t.Helper()
	info, err := replica.Client(t).Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(info, "master_link_status:up")
}
