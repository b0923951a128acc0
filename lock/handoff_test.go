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

// TestWaiterThatLeftWithdrawsItsClaim (issue 23): a waiter that gives up
// takes its mark off the lock, so that the holder's release frees the lock
// at once, instead of reserving it for the hand-off grace for a waiter
// that is gone (before, a TryLock right after the Unlock failed).
func TestWaiterThatLeftWithdrawsItsClaim(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	m := lock.NewMutex(rdb, "left")
	held, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := lock.NewMutex(rdb, "left").Lock(wctx)
		gave <- err
	}()
	redistest.Eventually(t, "the waiter's mark on the lock", func() bool {
		return strings.Contains(rdb.Get(ctx, "dogpile:mutex:{left}").Val(), "+1") // its ticket, from the clock
	})
	cancel()
	if err := <-gave; !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("the waiter's Lock = %v; want ErrNotObtained", err)
	}
	lock.WaitRollbacks() // its withdrawal
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, ok, err := m.TryLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TryLock right after the Unlock = %v, %v; want the lock: nobody waits any more", ok, err)
	}
	l.Unlock(ctx)
}
