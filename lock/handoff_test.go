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

// TestReleaserDoesNotBarge: a process that releases a lock another process
// waits for and at once asks for it again must not take it back (it would
// win every race by a round trip, starving the waiter): the release hands
// the lock to the waiter. On every kind of deployment.
func TestReleaserDoesNotBarge(t *testing.T) {
	redistest.ForEachBackend(t, func(t *testing.T, b redistest.Backend) {
		testReleaserDoesNotBarge(t, b.Client(t), b.Client(t)) // two processes
	})
}

func testReleaserDoesNotBarge(t *testing.T, mine, theirs redis.UniversalClient) {
	ctx := t.Context()
	m := lock.NewMutex(mine, "handoff", lock.WithTTL(time.Minute))
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := lock.NewMutex(theirs, "handoff").Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitForWaiter(t, theirs, "dogpile:mutex:{handoff}:wake")
	start := time.Now()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := m.TryLock(ctx); ok || err != nil {
		took := time.Since(start)
		l.Unlock(ctx)
		if ok && took > lock.HandoffGrace {
			// The reservation lapses after the grace, by design (a waiter
			// that is gone must not hold the lock up), and the waiter did
			// not come in time: a stalled machine, not a barge.
			t.Skipf("Unlock and TryLock took %v, past the %v hand-off grace, and the waiter was slower: no verdict", took, lock.HandoffGrace)
		}
		t.Fatalf("TryLock right after Unlock, with another process waiting = %v, %v (%v after the Unlock began); want false: handed to the waiter", ok, err, took)
	}
	again := make(chan *lock.Lease, 1)
	go func() {
		l, err := m.Lock(ctx) // queues behind the waiter
		if err != nil {
			t.Error(err)
		}
		again <- l
	}()
	var theirL *lock.Lease
	select {
	case theirL = <-got:
	case l := <-again:
		l.Unlock(ctx)
		t.Fatal("the releaser took the lock back before the waiter")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
	checkLocked(t, "held by the waiter", func() (bool, error) { return m.Locked(ctx) }, true)
	theirL.Unlock(ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case l := <-again:
		l.Unlock(wctx)
	case <-wctx.Done():
		t.Fatal("the releaser's second Lock never got the lock")
	}
}

// TestWaiterThatLeftWithdrawsItsClaim (issues 23 and 43): a waiter whose
// context ends takes back its claim before its Lock returns (a plain
// mutex's ticket on the lock, a place in a fair mutex's or a semaphore's
// queue, a waiting writer's hold on new readers, a waiting reader's place
// among those the writer's release admits), so that the holder's Unlock
// right after frees the lock for anyone: a TryLock at once gets it. Before,
// the withdrawal ran in the background after Lock returned, and the
// release reserved the lock for the departed ticket (or woke the departed
// head of the queue), so the TryLock failed. Here every command sent for
// a waiter that has given up takes 200 ms, so that the old order fails
// every time (5 of 5 primitives, 10 of 10 runs), and the wait for the
// withdrawal is lengthened, so that a busy machine cannot fail the new.
func TestWaiterThatLeftWithdrawsItsClaim(t *testing.T) {
	const slow = 200 * time.Millisecond
	rdb := redistest.StartServer(t).Client(t)
	rdb.AddHook(redistest.Hook{Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if w, ok := ctx.Value(leftKey{}).(context.Context); ok && w.Err() != nil {
			time.Sleep(slow) // sent for a waiter that gave up
		}
		return next(ctx, cmd)
	}})
	ctx := t.Context()
	zcard := func(key string) func() bool {
		return func() bool { return rdb.ZCard(ctx, key).Val() == 1 }
	}
	patient := lock.WithWithdrawWait(10 * time.Second)
	m := lock.NewMutex(rdb, "left-m", patient)
	fair := lock.NewMutex(rdb, "left-f", lock.WithFair(), patient)
	s := lock.NewSemaphore(rdb, "left-s", 1, patient)
	rw, rr := lock.NewRWMutex(rdb, "left-w", patient), lock.NewRWMutex(rdb, "left-r", patient)
	acquire := func(ctx context.Context) (*lock.Lease, error) { return s.Acquire(ctx, 1) }
	tryAcquire := func(ctx context.Context) (*lock.Lease, bool, error) { return s.TryAcquire(ctx, 1) }
	for _, c := range []struct {
		name       string
		hold, wait func(context.Context) (*lock.Lease, error)
		claimed    func() bool // the waiter's claim is in Redis
		try        func(context.Context) (*lock.Lease, bool, error)
	}{
		{"Mutex", m.Lock, m.Lock, func() bool {
			return strings.Contains(rdb.Get(ctx, "dogpile:mutex:{left-m}").Val(), "+1") // its ticket, from the clock
		}, m.TryLock},
		{"fair Mutex", fair.Lock, fair.Lock, zcard("dogpile:mutex:{left-f}:q"), fair.TryLock},
		{"Semaphore", acquire, acquire, zcard("dogpile:sem:{left-s}:q"), tryAcquire},
		{"RWMutex writer", rw.Lock, rw.Lock, zcard("dogpile:rw:{left-w}:ww"), rw.TryRLock},
		{"RWMutex reader", rr.Lock, rr.RLock, zcard("dogpile:rw:{left-r}:rq"), rr.TryLock},
	} {
		t.Run(c.name, func(t *testing.T) {
			held, err := c.hold(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			wctx = context.WithValue(wctx, leftKey{}, wctx)
			gave := make(chan error, 1)
			go func() {
				_, err := c.wait(wctx)
				gave <- err
			}()
			redistest.Eventually(t, "the waiter's claim", c.claimed)
			cancel()
			if err := <-gave; !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
				t.Fatalf("the waiter's Lock = %v; want ErrNotObtained and context.Canceled", err)
			}
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			l, ok, err := c.try(ctx)
			if err != nil || !ok {
				t.Fatalf("TryLock right after the Unlock = %v, %v; want the lock: nobody waits any more", ok, err)
			}
			l.Unlock(ctx)
		})
	}
}

// leftKey marks the context of a waiter, itself, for the hook that slows
// what is sent for it once it is done.
type leftKey struct{}
