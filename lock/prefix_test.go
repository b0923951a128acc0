package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// An errorPath is one way a lock call fails: call makes it fail, and
// the error must match every error in want.
type errorPath struct {
	name string
	call func(t *testing.T) error
	want []error
}

// TestErrorsCarryPrefixOnce (issue 43): however the errors of the package
// nest (ErrNotObtained wrapping ErrReplication, a round trip's failure
// wrapping either, foreign data wrapping ErrNotHeld), a message reads with
// one "lock:" prefix (it read `lock: acquire mutex "x": lock: not
// obtained: lock: not acknowledged by enough replicas ...`), and errors.Is
// still matches every error it matched before.
func TestErrorsCarryPrefixOnce(t *testing.T) {
	var paths []errorPath
	paths = append(paths, replicaPaths(t)...)
	paths = append(paths, busyPaths(t)...)
	paths = append(paths, foreignPaths(t)...)
	paths = append(paths, downPaths(t)...)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			err := p.call(t)
			if err == nil {
				t.Fatal("no error")
			}
			if n := strings.Count(err.Error(), "lock:"); n != 1 {
				t.Errorf("%q has %d \"lock:\"; want 1", err, n)
			}
			for _, want := range p.want {
				if !errors.Is(err, want) {
					t.Errorf("%q does not match %q", err, want)
				}
			}
		})
	}
}

// replicaPaths: acquires that no replica acknowledges, and an extension
// after the replica left.
func replicaPaths(t *testing.T) []errorPath {
	rdb := redistest.StartServer(t).Client(t) // no replica
	ack := lock.WithReplicaAck(1, 20*time.Millisecond)
	unacked := []error{lock.ErrNotObtained, lock.ErrReplication}
	var paths []errorPath
	for _, p := range primitives(rdb, "unacked", ack)[:5] { // all but Redlock, which ignores the option
		paths = append(paths,
			errorPath{"acknowledged by no replica: " + p.name + " Lock", func(t *testing.T) error {
				_, err := p.lock(t.Context())
				return err
			}, unacked},
			errorPath{"acknowledged by no replica: " + p.name + " TryLock", func(t *testing.T) error {
				// The Lock above was undone in the background: still
				// held, the lock would make TryLock report busy (no
				// error) on a loaded machine.
				lock.WaitRollbacks()
				_, _, err := p.try(t.Context())
				return err
			}, unacked})
	}
	return append(paths, errorPath{"extension acknowledged by no replica", func(t *testing.T) error {
		master, replica := startReplicated(t)
		m := lock.NewMutex(master.Client(t), "acked", lock.WithReplicaAck(1, 300*time.Millisecond))
		var l *lock.Lease
		var err error
		// Acknowledged within 300 ms, but for a replica a busy machine
		// stalled: then the next try.
		if !redistest.Within(redistest.EventuallyWithin, func() bool { l, err = m.Lock(t.Context()); return err == nil }) {
			t.Fatalf("Lock with the replica in sync: %v", err)
		}
		if err := replica.Client(t).Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatal(err)
		}
		return l.Extend(t.Context(), time.Minute)
	}, []error{lock.ErrReplication}})
}

// busyPaths: blocking acquires of a busy lock that give up.
func busyPaths(t *testing.T) []errorPath {
	rdb := redistest.StartServer(t).Client(t)
	var paths []errorPath
	for _, p := range primitives(rdb, "busy", lock.WithTTL(time.Minute)) {
		paths = append(paths, errorPath{"not obtained by the deadline: " + p.name, func(t *testing.T) error {
			held, err := p.lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(t.Context())
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			_, err = p.lock(ctx)
			return err
		}, []error{lock.ErrNotObtained, context.DeadlineExceeded}})
	}
	return append(paths, errorPath{"not obtained within WithWaitTimeout", func(t *testing.T) error {
		held, err := lock.NewMutex(rdb, "waited").Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer held.Unlock(t.Context())
		_, err = lock.NewMutex(rdb, "waited", lock.WithWaitTimeout(20*time.Millisecond)).Lock(t.Context())
		return err
	}, []error{lock.ErrNotObtained, context.DeadlineExceeded}})
}

// foreignPaths: another program's data where a lock's keys live.
func foreignPaths(t *testing.T) []errorPath {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	// overwritten returns a lease of the mutex called name whose key then
	// holds a hash: its calls get WRONGTYPE.
	overwritten := func(t *testing.T, name string) *lock.Lease {
		l, err := lock.NewMutex(rdb, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, "dogpile:mutex:{"+name+"}")
		rdb.HSet(ctx, "dogpile:mutex:{"+name+"}", "not", "a lock")
		return l
	}
	return []errorPath{
		{"foreign data at the lock: Lock", func(t *testing.T) error {
			rdb.Set(ctx, "dogpile:mutex:{alien}", "not a lock", 0)
			_, err := lock.NewMutex(rdb, "alien").Lock(ctx)
			return err
		}, nil},
		{"foreign data at the fencing counter: Lock", func(t *testing.T) error {
			rdb.Set(ctx, "dogpile:mutex:{alien-fence}:fence", "not a number", 0)
			_, err := lock.NewMutex(rdb, "alien-fence").Lock(ctx)
			return err
		}, nil},
		{"foreign data at the lock: Unlock", func(t *testing.T) error {
			return overwritten(t, "alien-unlock").Unlock(ctx)
		}, []error{lock.ErrNotHeld}},
		{"foreign data at the lock: Extend", func(t *testing.T) error {
			return overwritten(t, "alien-extend").Extend(ctx, time.Minute)
		}, []error{lock.ErrNotHeld}},
		{"foreign data at the lock: TTL", func(t *testing.T) error {
			_, err := overwritten(t, "alien-ttl").TTL(ctx)
			return err
		}, []error{lock.ErrNotHeld}},
	}
}

// downPaths: Redis down, the client's circuit open; a Redlock's majority
// down.
func downPaths(t *testing.T) []errorPath {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	l, err := lock.NewMutex(rdb, "down").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	m := lock.NewMutex(rdb, "down")
	open := func(t *testing.T) {
		redistest.Eventually(t, "the circuit to open", func() bool {
			_, _, err := m.TryLock(t.Context())
			return errors.Is(err, lock.ErrUnavailable)
		})
	}
	unavailable := []error{lock.ErrUnavailable}
	return []errorPath{
		{"unavailable: Lock", func(t *testing.T) error {
			open(t)
			_, err := m.Lock(t.Context())
			return err
		}, unavailable},
		{"unavailable: Extend", func(t *testing.T) error {
			open(t)
			return l.Extend(t.Context(), time.Minute)
		}, unavailable},
		{"unavailable: Locked", func(t *testing.T) error {
			open(t)
			_, err := m.Locked(t.Context())
			return err
		}, unavailable},
		{"Redlock with a majority down", func(t *testing.T) error {
			srvs, clients := startRedlock(t)
			for _, s := range srvs[:3] {
				s.Kill()
			}
			_, _, err := lock.NewRedlock(clients(), "down").TryLock(t.Context())
			return err
		}, nil},
	}
}
