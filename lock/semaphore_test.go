package lock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// permitChecker counts permits in use and remembers the most seen at once.
type permitChecker struct {
	inUse, maxSeen atomic.Int64
}

func (p *permitChecker) take(n int64) {
	v := p.inUse.Add(n)
	for {
		m := p.maxSeen.Load()
		if v <= m || p.maxSeen.CompareAndSwap(m, v) {
			return
		}
	}
}

func (p *permitChecker) give(n int64) { p.inUse.Add(-n) }

func testSemaphoreLimit(t *testing.T, clients []redis.UniversalClient, goroutines, rounds int) {
	const permits = 4
	var p permitChecker
	var acquired atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		for i := range goroutines {
			s := lock.NewSemaphore(c, "pool", permits, lock.WithTTL(5*time.Second))
			n := int64(1 + i%2) // mixed weights
			wg.Go(func() {
				for range rounds {
					l, err := s.Acquire(t.Context(), n)
					if err != nil {
						t.Errorf("Acquire(%d): %v", n, err)
						return
					}
					p.take(n)
					acquired.Add(1)
					time.Sleep(200 * time.Microsecond) // work: widens the window an overlap would need
					p.give(n)
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := p.maxSeen.Load(); got > permits {
		t.Errorf("max permits in use = %d; want <= %d", got, permits)
	}
	if got, want := acquired.Load(), int64(len(clients)*goroutines*rounds); got != want {
		t.Errorf("acquisitions = %d; want %d", got, want)
	}
	avail, err := lock.NewSemaphore(clients[0], "pool", permits).Available(t.Context())
	if err != nil || avail != permits {
		t.Errorf("Available after all released = %d, %v; want %d", avail, err, permits)
	}
}

// The semaphore suite, fair mutexes included, runs on every kind of
// deployment.
var semaphoreSuite = redistest.Suite{
	{Name: "NeverMoreThanN", Test: func(t *testing.T, b redistest.Backend) { testSemaphoreLimit(t, b.Clients(t, 2), 8, 5) }},
	{Name: "FIFO", Test: onClient(testSemaphoreFIFO)},
	{Name: "FairMutexFIFO", Test: onClient(testFairMutexFIFO)},
	{Name: "HeadBlocksSmallerRequests", Test: onClient(testSemaphoreHeadBlocksSmallerRequests)},
	{Name: "DoubleReleaseNeverInflates", Test: onClient(testSemaphoreDoubleReleaseNeverInflates)},
	{Name: "ExpiredHolderGivesBack", Test: onClient(testSemaphoreExpiredHolderGivesBack)},
	{Name: "CancelledWaiterLeavesQueue", Test: onClient(testSemaphoreCancelledWaiterLeavesQueue)},
	{Name: "UnlockWithCancelledContext", Test: onClient(testSemaphoreUnlockWithCancelledContext)},
	{Name: "KeysExpire", Test: onClient(testSemaphoreKeysExpire)},
	{Name: "FairAndPlainMutexExclude", Test: onClient(testFairAndPlainMutexExclude)},
	{Name: "FairMutexShareIsEven", Test: onClient(testFairMutexShareIsEven)},
}

func TestSemaphore(t *testing.T) { semaphoreSuite.Run(t) }

// queueLen returns how many waiters are queued for the named semaphore.
func queueLen(t *testing.T, rdb redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := rdb.ZCard(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueue polls Redis until the queue at key holds n waiters: it waits
// for observable state, not for time.
func waitQueue(t *testing.T, rdb redis.UniversalClient, key string, n int64) {
	t.Helper()
	var got int64
	if !redistest.Within(redistest.EventuallyWithin, func() bool { got = queueLen(t, rdb, key); return got == n }) {
		t.Fatalf("queue %s has %d waiters after %v; want %d", key, got, redistest.EventuallyWithin, n)
	}
}

// queueOrder returns the queued tokens by sequence number.
func queueOrder(t *testing.T, rdb redis.UniversalClient, key string) []string {
	t.Helper()
	toks, err := rdb.ZRange(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// testFIFO queues waiters behind a held lock, one at a time so that their
// arrival order is known, then releases and checks that they acquire in the
// order of their server-side sequence numbers.
func testFIFO(t *testing.T, rdb redis.UniversalClient, queue string, hold func() *lock.Lease, acquire func(context.Context) (*lock.Lease, error)) {
	const waiters = 8
	held := hold()
	var mu sync.Mutex
	var order []string // tokens in acquisition order
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Go(func() {
			l, err := acquire(t.Context())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, l.Token())
			mu.Unlock()
			time.Sleep(time.Millisecond) // work
			if err := l.Unlock(t.Context()); err != nil {
				t.Error(err)
			}
		})
		waitQueue(t, rdb, queue, int64(i+1))
	}
	want := queueOrder(t, rdb, queue)
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if !slices.Equal(order, want) {
		t.Errorf("acquisition order differs from queue order:\n got %q\nwant %q", order, want)
	}
}

func testSemaphoreFIFO(t *testing.T, rdb redis.UniversalClient) {
	s := lock.NewSemaphore(rdb, "fifo", 2, lock.WithTTL(10*time.Second))
	testFIFO(t, rdb, "dogpile:sem:{fifo}:q", func() *lock.Lease {
		l, err := s.Acquire(t.Context(), 2)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}, func(ctx context.Context) (*lock.Lease, error) { return s.Acquire(ctx, 2) })
}

func testSemaphoreHeadBlocksSmallerRequests(t *testing.T, rdb redis.UniversalClient) {
	// Strict FIFO, as x/sync/semaphore: a waiter for 3 of 3 permits is not
	// overtaken by later waiters for 1, or it would starve.
	s := lock.NewSemaphore(rdb, "big", 3)
	one, err := s.Acquire(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	big := make(chan *lock.Lease)
	go func() {
		l, err := s.Acquire(t.Context(), 3)
		if err != nil {
			t.Error(err)
		}
		big <- l
	}()
	waitQueue(t, rdb, "dogpile:sem:{big}:q", 1)
	if l, ok, err := s.TryAcquire(t.Context(), 1); ok || err != nil {
		t.Errorf("TryAcquire(1) with a waiter queued = %v, %v; want false, nil", ok, err)
		l.Unlock(t.Context())
	}
	if avail, _ := s.Available(t.Context()); avail != 2 {
		t.Errorf("Available = %d; want 2", avail)
	}
	one.Unlock(t.Context())
	l := <-big
	if avail, _ := s.Available(t.Context()); avail != 0 {
		t.Errorf("Available while the big waiter holds all = %d; want 0", avail)
	}
	l.Unlock(t.Context())
}

func testSemaphoreDoubleReleaseNeverInflates(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	s := lock.NewSemaphore(rdb, "double", 2)
	a, _ := s.Acquire(ctx, 1)
	b, _ := s.Acquire(ctx, 1)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := a.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("repeated Unlock = %v; want ErrNotHeld", err)
		}
	}
	if avail, err := s.Available(ctx); avail != 1 || err != nil {
		t.Errorf("Available = %d, %v; want 1 (b still holds one)", avail, err)
	}
	c, ok, _ := s.TryAcquire(ctx, 1)
	if !ok {
		t.Fatal("TryAcquire of the free permit failed")
	}
	if _, ok, _ := s.TryAcquire(ctx, 1); ok {
		t.Error("a third permit of two was granted after a double release")
	}
	b.Unlock(ctx)
	c.Unlock(ctx)
	if avail, _ := s.Available(ctx); avail != 2 {
		t.Errorf("Available = %d; want 2", avail)
	}
}

func testSemaphoreExpiredHolderGivesBack(t *testing.T, rdb redis.UniversalClient) {
	// A holder that never releases (and has no watchdog) loses its
	// permits after one TTL; its late Unlock cannot inflate the count.
	ctx := t.Context()
	s := lock.NewSemaphore(rdb, "leak", 1, lock.WithTTL(60*time.Millisecond))
	stale, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("waited %v for an expired holder's permit; want about one TTL", waited)
	}
	if !errors.Is(stale.Err(), lock.ErrLost) {
		t.Errorf("stale lease Err = %v; want ErrLost", stale.Err())
	}
	if err := stale.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("stale Unlock = %v; want ErrNotHeld", err)
	}
	if avail, _ := s.Available(ctx); avail != 0 {
		t.Errorf("Available = %d; want 0: the stale Unlock must not free the new holder's permit", avail)
	}
	if l.Fence() <= stale.Fence() {
		t.Errorf("fences %d then %d; want increasing", stale.Fence(), l.Fence())
	}
	l.Unlock(ctx)
}

func testSemaphoreCancelledWaiterLeavesQueue(t *testing.T, rdb redis.UniversalClient) {
	s := lock.NewSemaphore(rdb, "impatient", 1, lock.WithTTL(time.Minute))
	held, _ := s.Acquire(t.Context(), 1)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error)
	go func() {
		_, err := s.Acquire(ctx, 1)
		errc <- err
	}()
	waitQueue(t, rdb, "dogpile:sem:{impatient}:q", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Acquire = %v; want ErrNotObtained and context.Canceled", err)
	}
	lock.WaitRollbacks() // leaving runs in the background, see TestDeadlineHoldsWhileRedisPaused
	if n := queueLen(t, rdb, "dogpile:sem:{impatient}:q"); n != 0 {
		t.Errorf("queue length %d after the waiter gave up; want 0", n)
	}
	held.Unlock(t.Context())
	// The released permit is free for a newcomer: no ghost heads the queue.
	if l, ok, err := s.TryAcquire(t.Context(), 1); !ok || err != nil {
		t.Errorf("TryAcquire after cancel = %v, %v; want true", ok, err)
	} else {
		l.Unlock(t.Context())
	}
}

func testSemaphoreUnlockWithCancelledContext(t *testing.T, rdb redis.UniversalClient) {
	s := lock.NewSemaphore(rdb, "deferred", 1)
	ctx, cancel := context.WithCancel(t.Context())
	l, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock with a cancelled ctx = %v; want nil", err)
	}
	if avail, _ := s.Available(t.Context()); avail != 1 {
		t.Errorf("Available = %d; want 1", avail)
	}
}

func testSemaphoreKeysExpire(t *testing.T, rdb redis.UniversalClient) {
	// Every key carries a TTL, so an abandoned semaphore does not clutter
	// Redis (dv/redis-semaphore's "expiration"): the lease's, or the
	// fencing counter's retention.
	s := lock.NewSemaphore(rdb, "tidy", 1, lock.WithTTL(time.Minute))
	held, _ := s.Acquire(t.Context(), 1)
	go s.Acquire(t.Context(), 1) // a waiter, cancelled at the end of the test
	waitQueue(t, rdb, "dogpile:sem:{tidy}:q", 1)
	// KEYS would pick a random node on a cluster: ask for each key.
	for _, suffix := range []string{"h", "n", "q", "qx", "fence"} {
		k := "dogpile:sem:{tidy}:" + suffix
		d := rdb.PTTL(t.Context(), k).Val()
		if d < 0 || (suffix == "fence") != (d > time.Hour) {
			t.Errorf("%s PTTL = %v", k, d)
		}
	}
	held.Unlock(t.Context())
}
