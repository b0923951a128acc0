package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// replicaAckPrimitives acquires and releases a lease of each primitive on
// rdb with opts, returning the first error.
func replicaAckPrimitives(ctx context.Context, rdb redis.UniversalClient, name string, opts ...lock.Option) map[string]error {
	errs := map[string]error{}
	try := func(kind string, acquire func() (*lock.Lease, error)) {
		l, err := acquire()
		if err == nil {
			err = l.Unlock(ctx)
		}
		errs[kind] = err
	}
	try("mutex", func() (*lock.Lease, error) { return lock.NewMutex(rdb, name, opts...).Lock(ctx) })
	try("fair", func() (*lock.Lease, error) {
		return lock.NewMutex(rdb, name+"f", append(opts, lock.WithFair())...).Lock(ctx)
	})
	try("semaphore", func() (*lock.Lease, error) { return lock.NewSemaphore(rdb, name, 2, opts...).Acquire(ctx, 1) })
	try("rlock", func() (*lock.Lease, error) { return lock.NewRWMutex(rdb, name, opts...).RLock(ctx) })
	try("lock", func() (*lock.Lease, error) { return lock.NewRWMutex(rdb, name, opts...).Lock(ctx) })
	try("multimutex", func() (*lock.Lease, error) {
		return lock.NewMultiMutex(rdb, []string{name + "a", name + "b", name + "c"}, opts...).Lock(ctx)
	})
	return errs
}

// TestReplicaAck: with WithReplicaAck(1, ...) every primitive acquires
// (and its watchdog extends) on a master with a replica, on a sentinel
// failover client and on a cluster, WAIT reaching the master of each key.
func TestReplicaAck(t *testing.T) {
	t.Parallel() // its own deployments; mostly waiting for replicas
	// 2 s, under the client's 3 s ReadTimeout: a replica starved of CPU
	// beside the package's parallel tests acknowledged no write within 1 s.
	ack := lock.WithReplicaAck(1, 2*time.Second)
	for _, d := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"sentinel", func(t *testing.T) redis.UniversalClient { return redistest.StartSentinel(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartClusterReplicas(t, 3, 1).Client(t) }},
	} {
		t.Run(d.name, func(t *testing.T) {
			rdb := d.rdb(t)
			for kind, err := range replicaAckPrimitives(t.Context(), rdb, "acked", ack) {
				if err != nil {
					t.Errorf("%s with WithReplicaAck(1): %v", kind, err)
				}
			}
			// A 1 s TTL: with 150ms (renewed every 50ms, each waiting for
			// the replica) a loaded machine's stall lost the lease.
			l, err := lock.NewMutex(rdb, "watched", lock.WithReplicaAck(1, time.Second), lock.WithTTL(time.Second), lock.WithAutoExtend()).Lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // past the TTL: several acknowledged extensions
			if err := l.Err(); err != nil {
				t.Errorf("lease with acknowledged extensions: %v", err)
			}
			l.Unlock(t.Context())
		})
	}
}

// TestReplicaAckRefused: on a server without the replicas asked for, every
// acquire fails at once with ErrNotObtained and ErrReplication, and leaves
// nothing held (the acquire is rolled back).
func TestReplicaAckRefused(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	for kind, err := range replicaAckPrimitives(ctx, rdb, "lonely", lock.WithReplicaAck(1, 20*time.Millisecond)) {
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, lock.ErrReplication) {
			t.Errorf("%s without a replica = %v; want ErrNotObtained and ErrReplication", kind, err)
		}
	}
	lock.WaitRollbacks()
	for kind, err := range replicaAckPrimitives(ctx, rdb, "lonely") {
		if err != nil {
			t.Errorf("%s without the option after the refused acquires: %v (one left something held)", kind, err)
		}
	}
	keys, _ := rdb.Keys(ctx, "dogpile:mutex:{lonely}").Result()
	if len(keys) != 0 {
		t.Errorf("lock keys left: %v", keys)
	}
	mustPanicReplica(t, func() { lock.WithReplicaAck(0, time.Second) })
	mustPanicReplica(t, func() { lock.WithReplicaAck(1, 0) })
}

func mustPanicReplica(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Error("WithReplicaAck of a bad value did not panic")
		}
	}()
	f()
}

// TestReplicaAckLeaseSurvivesFailover: a lease acquired with WithReplicaAck
// is on the replica when its master dies: after the promotion another
// owner still finds the lock held, with a fence above the lease's.
func TestReplicaAckLeaseSurvivesFailover(t *testing.T) {
	t.Parallel() // its own cluster; mostly waiting for the failover
	cl := redistest.StartClusterReplicas(t, 3, 1)
	rdb := cl.Client(t)
	ctx := t.Context()
	const name = "kept"
	l, err := lock.NewMutex(rdb, name, lock.WithReplicaAck(1, time.Second), lock.WithTTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := masterOf(cl, name)
	cl.Nodes[i].Kill() // at once: nothing but the acknowledged writes reached the replica
	cl.AwaitPromotion(t, cl.Replicas[i][0])
	var held bool
	redistest.Within(redistest.EventuallyWithin, func() bool { // past the failover's errors
		held, err = lock.NewMutex(rdb, name).Locked(ctx)
		return err == nil
	})
	if err != nil || !held {
		t.Fatalf("Locked after the failover = %v, %v; want the acknowledged lease held", held, err)
	}
	// The dead master's connections may open the client's circuit again
	// after Locked's call went through: it lets a probe through every
	// 100 ms, so ErrUnavailable is retried as in the fence test.
	_, ok, err := lock.NewMutex(rdb, name).TryLock(ctx)
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, lock.ErrUnavailable) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		_, ok, err = lock.NewMutex(rdb, name).TryLock(ctx)
	}
	if ok || err != nil {
		t.Errorf("TryLock of the lock held across the failover = %v, %v; want busy", ok, err)
	}
	if l.Fence() <= 0 {
		t.Errorf("acknowledged lease's fence = %d", l.Fence())
	}
}
