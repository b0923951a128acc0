package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/wake"
	"github.com/dogpile-go/dogpile/lock"
)

// How a mutex's waiter waits, in the mutex suite: woken by the release,
// bounded by the holder's TTL, ended by its context.

func testWaiterWokenByRelease(t *testing.T, rdb redis.UniversalClient) {
	// A long TTL: without a push wake-up the waiter would sleep for
	// seconds, with one it acquires as soon as the holder releases.
	m := lock.NewMutex(rdb, "tap", lock.WithTTL(time.Minute))
	held, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	go func() {
		l, err := m.Lock(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- time.Now()
		l.Unlock(context.Background())
	}()
	waitForWaiter(t, rdb, "dogpile:mutex:{tap}:wake")
	released := time.Now()
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		t.Logf("waiter acquired %v after release", at.Sub(released))
	case <-time.After(1500 * time.Millisecond): // polling would take 2s
		t.Fatal("waiter was not woken by the release")
	}
}

// A holder that dies publishes nothing: the waiter must still get the lock
// once the holder's TTL runs out, because every wait is bounded by it.
func testExpiryFreesWaiterWithoutMessage(t *testing.T, rdb redis.UniversalClient) {
	m := lock.NewMutex(rdb, "orphan", lock.WithTTL(150*time.Millisecond))
	if _, ok, err := m.TryLock(t.Context()); !ok || err != nil {
		t.Fatal(ok, err) // never released: as if its process died
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the holder died = %v; want the lock within its TTL", err)
	}
	l.Unlock(ctx)
}

func testLockCancelledWhileWaiting(t *testing.T, rdb redis.UniversalClient) {
	m := lock.NewMutex(rdb, "busy")
	held, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(context.Background())
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		errc <- err
	}()
	waitForWaiter(t, rdb, "dogpile:mutex:{busy}:wake")
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("Lock = %v; want ErrNotObtained and context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Lock did not return after cancel")
	}
	l, err := lock.NewMutex(rdb, "busy", lock.WithWaitTimeout(20*time.Millisecond)).Lock(t.Context())
	if !errors.Is(err, context.DeadlineExceeded) || l != nil {
		t.Errorf("Lock with wait timeout = %v, %v; want nil, DeadlineExceeded", l, err)
	}
}

// waitForWaiter returns once a goroutine of this process waits, subscribed,
// on the wake-up channel of a lock.
func waitForWaiter(tb testing.TB, rdb redis.UniversalClient, channel string) {
	tb.Helper()
	redistest.Eventually(tb, "a waiter on "+channel, func() bool { return wake.Waiting(rdb, channel) > 0 })
}
