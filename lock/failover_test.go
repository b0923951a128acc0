package lock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/lock"
)

// TestFenceAboveEveryIssuedAcrossFailover (issue 23): fences drawn on a
// master whose replica no longer receives its writes are lost with it when
// it dies; after the replica's promotion the next fence is still above
// every fence issued before (it failed before the fix: the promoted
// replica's counter was behind, and INCR handed out numbers already used).
// Each primitive draws from its own counter, and a MultiMutex from one per
// name; every name is picked on the master that fails, so each is checked.
func TestFenceAboveEveryIssuedAcrossFailover(t *testing.T) {
	t.Parallel() // its own cluster; mostly waiting for the failover
	cl := redistest.StartClusterReplicas(t, 3, 1)
	rdb := cl.Client(t)
	ctx := t.Context()
	const name = "ledger"
	i := masterOf(cl, name)
	master, replica := cl.Nodes[i], cl.Replicas[i][0]
	fair := nameOn(t, cl, i, "ledger-fair", nil)
	multi := []string{nameOn(t, cl, i, "ledger-multi", nil)}
	multi = append(multi, nameOn(t, cl, i, "ledger-multi", func(n string) bool { // another slot
		return redisutil.Slot("{"+n+"}") != redisutil.Slot("{"+multi[0]+"}")
	}))
	acquires := map[string]func() (*lock.Lease, error){
		"mutex":      func() (*lock.Lease, error) { return lock.NewMutex(rdb, name).Lock(ctx) },
		"fair":       func() (*lock.Lease, error) { return lock.NewMutex(rdb, fair, lock.WithFair()).Lock(ctx) },
		"semaphore":  func() (*lock.Lease, error) { return lock.NewSemaphore(rdb, name, 2).Acquire(ctx, 1) },
		"rwmutex":    func() (*lock.Lease, error) { return lock.NewRWMutex(rdb, name).Lock(ctx) },
		"multimutex": func() (*lock.Lease, error) { return lock.NewMultiMutex(rdb, multi).Lock(ctx) },
	}
	// draw acquires and releases kind once and returns its fences, one per
	// counter: the MultiMutex's by name.
	draw := func(kind string) map[string]int64 {
		t.Helper()
		l, err := acquires[kind]()
		// Just after the failover the client's circuit may be open (the
		// master's death opened it): it lets a probe through every 100 ms.
		for deadline := time.Now().Add(10 * time.Second); errors.Is(err, lock.ErrUnavailable) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			l, err = acquires[kind]()
		}
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", kind, err)
		}
		if kind == "multimutex" {
			return l.Fences()
		}
		return map[string]int64{"": l.Fence()}
	}
	for kind := range acquires {
		draw(kind) // the counters reach the replica
	}
	if err := master.Client(t).Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	master.CutReplication(t)
	issued := map[string]map[string]int64{}
	for kind := range acquires {
		for range 3 {
			issued[kind] = draw(kind) // lost with the master
		}
	}
	if got := len(issued["multimutex"]); got != len(multi) {
		t.Fatalf("MultiMutex lease of %v has %d fences", multi, got)
	}
	master.Kill()
	cl.AwaitPromotion(t, replica)
	for kind, last := range issued {
		next := draw(kind)
		for counter, f := range last {
			if next[counter] <= f {
				t.Errorf("%s: fence %d after the failover; want above %d, the last issued before it",
					strings.TrimSpace(kind+" "+counter), next[counter], f)
			}
		}
	}
}

// masterOf is the index in cl.Nodes of the master that starts with the
// slot of every key of the lock name.
func masterOf(cl *redistest.Cluster, name string) int {
	slot, n := redisutil.Slot("{"+name+"}"), len(cl.Nodes)
	for i := range n { // the ranges of redistest's ADDSLOTSRANGE
		if slot < (i+1)*16384/n {
			return i
		}
	}
	return n - 1
}

// nameOn returns the first of prefix-0, prefix-1, ... whose keys master i
// of cl holds and that ok, if not nil, accepts.
func nameOn(t *testing.T, cl *redistest.Cluster, i int, prefix string, ok func(string) bool) string {
	t.Helper()
	for j := range 10000 {
		if n := fmt.Sprintf("%s-%d", prefix, j); masterOf(cl, n) == i && (ok == nil || ok(n)) {
			return n
		}
	}
	t.Fatalf("no name %s-N on master %d", prefix, i)
	return ""
}
