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
// Each primitive draws from its own counter; one of each is checked.
func TestFenceAboveEveryIssuedAcrossFailover(t *testing.T) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	rdb := cl.Client(t)
	ctx := t.Context()
	const name = "ledger"
	acquires := map[string]func() (*lock.Lease, error){
		"mutex":     func() (*lock.Lease, error) { return lock.NewMutex(rdb, name).Lock(ctx) },
		"fair":      func() (*lock.Lease, error) { return lock.NewMutex(rdb, name+"-fair", lock.WithFair()).Lock(ctx) },
		"semaphore": func() (*lock.Lease, error) { return lock.NewSemaphore(rdb, name, 2).Acquire(ctx, 1) },
		"rwmutex":   func() (*lock.Lease, error) { return lock.NewRWMutex(rdb, name).Lock(ctx) },
	}
	draw := func(kind string) int64 {
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
		return l.Fence()
	}
	// Every primitive's keys of name share one slot: one master holds them.
	i := redisutil.Slot("{"+name+"}") * len(cl.Nodes) / 16384
	master, replica := cl.Nodes[i], cl.Replicas[i][0]
	for kind := range acquires {
		if kind == "fair" {
			i2 := redisutil.Slot("{"+name+"-fair}") * len(cl.Nodes) / 16384
			if i2 != i {
				delete(acquires, kind) // another master: not part of this failover
				continue
			}
		}
		draw(kind) // the counter reaches the replica
	}
	if err := master.Client(t).Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	cutReplication(t, master)
	issued := map[string]int64{}
	for kind := range acquires {
		for range 3 {
			issued[kind] = draw(kind) // lost with the master
		}
	}
	master.Kill()
	cl.AwaitPromotion(t, replica)
	for kind, last := range issued {
		if f := draw(kind); f <= last {
			t.Errorf("%s: fence %d after the failover; want above %d, the last issued before it", kind, f, last)
		}
	}
}

// cutReplication stops master's writes from reaching its replicas.
func cutReplication(t *testing.T, master *redistest.Server) {
	t.Helper()
	rdb := master.Client(t)
	if err := rdb.Do(t.Context(), "ACL", "SETUSER", "default", "-sync", "-psync").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(t.Context(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFenceLagIsTheScripts: fenceLag's microseconds are the number the
// scripts compare with.
func TestFenceLagIsTheScripts(t *testing.T) {
	for name, src := range lock.FenceScripts() {
		if !strings.Contains(src, fmt.Sprint(lock.FenceLag.Microseconds())) {
			t.Errorf("%s does not use fenceLag (%v)", name, lock.FenceLag)
		}
	}
}
