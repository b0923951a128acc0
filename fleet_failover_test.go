package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestFetchComputeAcrossFailover (issue 23): the master that holds a key
// is killed while process A computes the key, and its replica is promoted;
// then process B fetches the key. Whether the compute lock had reached the
// replica or not, the fleet computes the key at most once more, and no
// value in Redis is ever older than one a caller was served: every value
// carries the version of the compute that made it, and a reader (a third
// process) checks Redis throughout.
//
//   - lock-lost: the replica gets none of A's writes (replication cut
//     before A takes the lock), so the promoted replica has no lock. A's
//     lease renewal is refused there and A's compute, which ignores its
//     context, runs on; B computes the key again and stores it. When A's
//     compute returns, its store is refused (fenced): Redis keeps B's newer
//     value, which A's flight then finds and answers its callers with.
//   - lock-replicated: the replica has A's lock (WAIT), so B waits for A,
//     unless A's lease ran out during the failover (a renewal could not
//     reach a master for most of a lease): then A starts over, and one of
//     them computes once more.
func TestFetchComputeAcrossFailover(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	for _, cut := range []bool{true, false} {
		name := map[bool]string{true: "lock-lost", false: "lock-replicated"}[cut]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fetchAcrossFailover(t, cut)
		})
	}
}

func fetchAcrossFailover(t *testing.T, cut bool) {
	cl := redistest.StartClusterReplicas(t, 3, 1)
	ctx := t.Context()
	master, replica := cl.Nodes[0], cl.Replicas[0][0]
	key := failoverKeyOn(t, cl.Client(t), master)
	// One client per process, each Cache made before its client's first
	// command, as the docs ask (the breaker then hooks every node).
	ac, bc, rc := cl.Client(t), cl.Client(t), cl.Client(t)
	a := dogpile.New[int64](ac)
	b := dogpile.New[int64](bc)
	reader := dogpile.New[int64](rc)
	for _, c := range []*dogpile.Cache[int64]{a, b, reader} {
		t.Cleanup(func() { _ = c.Close() })
	}

	var (
		versions atomic.Int64 // the backend: each compute makes the next version
		served   atomic.Int64 // the highest version a caller was served
	)
	serve := func(who string, v int64, err error) {
		if err == nil {
			t.Logf("%s served version %d", who, v)
			for m := served.Load(); v > m && !served.CompareAndSwap(m, v); m = served.Load() {
			}
		}
	}
	started, release := make(chan int64, 4), make(chan struct{})
	computeA := func(ctx context.Context) (int64, error) {
		v := versions.Add(1)
		started <- v
		if cut {
			<-release // a compute that ignores its context: it runs past its lost lease
			return v, nil
		}
		select {
		case <-release:
			return v, nil
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	computeB := func(context.Context) (int64, error) { return versions.Add(1), nil }

	// The reader: what Redis holds is never older than a version that was
	// served before the read began.
	stopReader := make(chan struct{})
	var readerWG sync.WaitGroup
	readerWG.Go(func() {
		var last int64
		for {
			select {
			case <-stopReader:
				return
			case <-time.After(5 * time.Millisecond):
			}
			floor := served.Load()
			v, err := reader.Get(ctx, key)
			if err != nil {
				continue // a miss, or the dead master
			}
			if v < floor || v < last {
				t.Errorf("Redis holds version %d after version %d was served and %d read", v, floor, last)
			}
			last = max(last, v)
		}
	})

	if cut {
		master.CutReplication(t)
	}
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		v, err := a.Fetch(ctx, key, time.Minute, computeA)
		serve("A", v, err)
		if cut && (err != nil || v != 2) {
			t.Errorf("A's Fetch = %d, %v; want 2, B's (A's store was refused)", v, err)
		} else if err != nil {
			t.Logf("A's Fetch: %v", err)
		}
	}()
	<-started
	if !cut {
		if err := master.Client(t).Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	master.Kill()
	cl.AwaitPromotion(t, replica)
	redistest.Eventually(t, "B's client to route the key to the promoted replica", func() bool {
		bc.ReloadState(ctx) // go-redis reloads the slots by itself only after a MOVED, or a minute
		m, err := bc.MasterForKey(ctx, "{"+key+"}")
		return err == nil && m.Options().Addr == replica.Addr()
	})

	bDone := make(chan struct{})
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second) // B must not wait for A's compute in lock-lost
	defer cancel()
	go func() {
		defer close(bDone)
		v, err := b.Fetch(bctx, key, time.Minute, computeB)
		// B's client may have dialled the dead master (its slot map was
		// stale): the circuit lets a probe through every 100 ms, and a call
		// it turned away sent nothing.
		for errors.Is(err, dogpile.ErrUnavailable) && bctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			v, err = b.Fetch(bctx, key, time.Minute, computeB)
		}
		serve("B", v, err)
		if err != nil {
			t.Errorf("B's Fetch after the promotion: %v", err)
		}
	}()
	if cut {
		<-bDone // B computed and stored while A's compute still runs
		// A's client follows the failover too, so that A's store reaches
		// the promoted replica (rather than fail at the dead master).
		redistest.Eventually(t, "A's client to reach the promoted replica", func() bool {
			v, err := a.Get(ctx, key)
			serve("A's Get", v, err)
			return err == nil
		})
	} else {
		redistest.Eventually(t, "B to wait or compute", func() bool {
			s := b.Stats()
			return s.Waits+s.Computes > 0
		})
	}
	close(release)
	<-aDone
	<-bDone

	if n := versions.Load(); n > 2 {
		t.Errorf("%d computes of the key; want at most 2 (one more than without the failover)", n)
	}
	t.Logf("computes: %d (A %d, B %d); B waited %d times", versions.Load(), a.Stats().Computes, b.Stats().Computes, b.Stats().Waits)
	close(stopReader)
	readerWG.Wait()
	var stored int64
	var err error
	redistest.Eventually(t, "the reader's client to reach the promoted replica", func() bool {
		stored, err = reader.Get(ctx, key)
		return !errors.Is(err, dogpile.ErrUnavailable)
	})
	if err != nil || stored < served.Load() {
		t.Errorf("Redis holds %d, %v after every compute returned; want the highest version served, %d", stored, err, served.Load())
	}
	for who, c := range map[string]*dogpile.Cache[int64]{"A": a, "B": b} {
		var v int64
		redistest.Eventually(t, who+"'s Fetch to reach the promoted replica", func() bool {
			v, err = c.Fetch(ctx, key, time.Minute, func(context.Context) (int64, error) {
				return 0, errors.New("a third compute")
			})
			return !errors.Is(err, dogpile.ErrUnavailable)
		})
		if err != nil || v != stored {
			t.Errorf("%s's Fetch after the failover = %d, %v; want %d, the stored version", who, v, err, stored)
		}
	}
}

// failoverKeyOn returns a key whose value and compute lock master holds.
func failoverKeyOn(t *testing.T, cc *redis.ClusterClient, master *redistest.Server) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprint("ledger-", i)
		m, err := cc.MasterForKey(t.Context(), "{"+k+"}") // the tag of every key of k
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == master.Addr() {
			return k
		}
	}
	t.Fatalf("no key on %s", master.Addr())
	return ""
}
