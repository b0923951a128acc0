package dogpile_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestNearCacheCluster: on a 3-master cluster, the tier tracks each master
// on a connection of its own, and writes of keys in every master's slots
// reach it; killing one master's tracking connection flushes the tier.
func TestNearCacheCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	a := dogpile.NewNearCache[string](t, cl.Client(t), 1000)
	b := dogpile.New[string](cl.Client(t), prefix(t))
	ctx := t.Context()
	keys := make([]string, 30) // spread over the three masters' slots
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if err := b.Set(ctx, keys[i], "v1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		dogpile.FetchNear(t, a, k)
	}
	for i, n := range cl.Nodes {
		if got := trackingConns(t, n, dogpile.Tracker(a).Config().Readers); got != 1 {
			t.Errorf("master %d has %d tracking connections; want 1", i, got)
		}
	}
	for _, k := range keys {
		if err := b.Set(ctx, k, "v2", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, "the invalidations", func() bool { return a.Stats().NearInvalidations >= uint64(len(keys)) })
	for _, k := range keys {
		if v := dogpile.FetchValue(t, a, k); v != "v2" {
			t.Fatalf("Fetch(%q) after the other process's Set = %q; want v2", k, v)
		}
	}
	dogpile.FetchNear(t, a, keys[0])
	flushes := a.Stats().NearFlushes
	admin := cl.Nodes[1].Client(t)
	if err := admin.Do(ctx, "CLIENT", "KILL", "ID", trackingClientID(t, admin)).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the flush", func() bool { return a.Stats().NearFlushes > flushes })
	for _, k := range keys {
		dogpile.FetchNear(t, a, k) // tracking is back on every master
	}
}

// trackingConns counts the tracking sessions on a server: their
// subscribers (see trackingClientID). It fails t if the server holds more
// of their readers (tracked, not subscribed) than that many sessions have,
// of perSession each (near.Config.Readers).
func trackingConns(t *testing.T, s *redistest.Server, perSession int) int {
	t.Helper()
	subs, readers := 0, 0
	for _, c := range tracked(t, s.Client(t)) {
		if strings.Contains(c["flags"], "P") {
			subs++
		} else {
			readers++
		}
	}
	if readers > subs*perSession {
		t.Errorf("%d readers for %d tracking sessions; want at most %d each", readers, subs, perSession)
	}
	return subs
}

// TestNearCacheIdleRestart: a Fetch that comes as the tracker finds the
// Cache idle, while its sessions are still ending, gets the tier back on
// every master, with one tracking connection each. (A run that let the
// next one start before its sessions had ended cleared the new run's
// masters: on a Cluster the tier stayed off for good.)
func TestNearCacheIdleRestart(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	cl := redistest.StartCluster(t, 3)
	a := dogpile.NewNearCache[string](t, cl.Client(t), 1000)
	b := dogpile.New[string](cl.Client(t), prefix(t))
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		if err := b.Set(t.Context(), keys[i], "v1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	var err error
	fetched := make(chan struct{})
	dogpile.Tracker(a).AfterIdle = func() { // set before the tracker starts
		once.Do(func() {
			go func() {
				defer close(fetched)
				_, err = a.Fetch(context.Background(), keys[0], time.Minute, redistest.NoCompute[string])
			}()
			<-fetched // the Fetch is done before the sessions end
		})
	}
	for _, k := range keys {
		dogpile.FetchNear(t, a, k)
	}
	flushes := a.Stats().NearFlushes
	<-fetched // no Fetch now: the tracker finds a idle within Idle and a tick
	if err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the idle run's end", func() bool { return a.Stats().NearFlushes > flushes })
	for _, k := range keys {
		dogpile.FetchNear(t, a, k)
	}
	for i, n := range cl.Nodes {
		if got := trackingConns(t, n, dogpile.Tracker(a).Config().Readers); got != 1 {
			t.Errorf("master %d has %d tracking connections; want 1", i, got)
		}
	}
}
