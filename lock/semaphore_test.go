package lock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
	"github.com/redis/go-redis/v9"
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

func testFairMutexFIFO(t *testing.T, rdb redis.UniversalClient) {
	m := lock.NewMutex(rdb, "fifo", lock.WithFair(), lock.WithTTL(10*time.Second))
	testFIFO(t, rdb, "dogpile:mutex:{fifo}:q", func() *lock.Lease {
		l, err := m.Lock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return l
	}, m.Lock)
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

func TestSemaphoreCrashedHolderProcess(t *testing.T) {
	// Two child processes take 2 permits each of 4 and are SIGKILLed: the
	// permits must come back within the lease (300ms), with nothing left
	// to clean up by hand.
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	s := lock.NewSemaphore(rdb, "crash", 4)
	var kids []*holder
	for range 2 {
		h := startChild(t, srv.Addr(), "sem2", "crash")
		h.held(t)
		kids = append(kids, h)
	}
	if _, ok, _ := s.TryAcquire(t.Context(), 1); ok {
		t.Fatal("a permit was free while the children held all 4")
	}
	time.Sleep(400 * time.Millisecond) // the children's watchdogs keep the lease past its TTL
	if avail, _ := s.Available(t.Context()); avail != 0 {
		t.Fatalf("Available = %d while the children are alive; want 0", avail)
	}
	for _, h := range kids {
		h.kill()
	}
	killed := time.Now()
	l, err := s.Acquire(t.Context(), 4)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(killed); waited > 2*time.Second {
		t.Errorf("permits came back %v after the crash; want within the 300ms lease", waited)
	}
	l.Unlock(t.Context())
}

func TestSemaphoreGhostWaitersLeaveQueue(t *testing.T) {
	// Five waiters queue behind a holder; three of them are processes that
	// are then SIGKILLed. The two live ones must get the lock in their
	// queue order, and the dead tickets must be gone within their lease.
	//
	// Only the ghosts (the children) have 300ms tickets: the holder and the
	// live waiters use a TTL a stall of this process cannot outrun. With
	// 300ms for all, a loaded machine lost the holder's lease (the first
	// child took the lock: "queue has 0 waiters; want 1") or let a live
	// waiter's ticket lapse, which sent it to the back of the queue (2 runs
	// in 30 failed).
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	const q = "dogpile:mutex:{ghosts}:q"
	m := lock.NewMutex(rdb, "ghosts", lock.WithFair(), lock.WithTTL(time.Minute))
	held, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var kids []*holder
	got := make(chan string, 2)
	live := func() {
		l, err := m.Lock(t.Context())
		if err != nil {
			t.Error(err)
			got <- ""
			return
		}
		got <- l.Token()
		l.Unlock(context.Background())
	}
	// A child's ticket may lapse and rejoin (same token, at the back) if
	// the child stalls, so the live waiters are told apart by token, not
	// by their place when they joined.
	seen := map[string]bool{}
	var liveToks []string
	for i := range 5 {
		if i == 1 || i == 3 {
			go live()
		} else {
			kids = append(kids, startChild(t, srv.Addr(), "fair", "ghosts"))
		}
		waitQueue(t, rdb, q, int64(i+1))
		for _, tok := range queueOrder(t, rdb, q) {
			if !seen[tok] && (i == 1 || i == 3) {
				liveToks = append(liveToks, tok)
			}
			seen[tok] = true
		}
	}
	var want []string
	for _, tok := range queueOrder(t, rdb, q) {
		if slices.Contains(liveToks, tok) {
			want = append(want, tok)
		}
	}
	if len(want) != 2 {
		t.Fatalf("live waiters' tokens %q in the queue; want 2", want)
	}
	for _, h := range kids {
		h.kill()
	}
	killed := time.Now()
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	first, second := <-got, <-got
	if first != want[0] || second != want[1] {
		t.Errorf("live waiters acquired as %q, %q; want queue order %q", first, second, want)
	}
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("ghosts held up the queue for %v; want about one 300ms ticket lease", d)
	}
	waitQueue(t, rdb, q, 0) // the last ghost's ticket expires with its lease
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("ghost tickets stayed queued for %v; want about one 300ms ticket lease", d)
	}
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

func testFairAndPlainMutexExclude(t *testing.T, rdb redis.UniversalClient) {
	// Mixing WithFair and plain lockers of one name loses fairness, never
	// exclusion, and fencing numbers still increase.
	var x exclusion
	var wg sync.WaitGroup
	for i := range 8 {
		opts := []lock.Option{lock.WithTTL(5 * time.Second)}
		if i%2 == 0 {
			opts = append(opts, lock.WithFair())
		}
		m := lock.NewMutex(rdb, "mixed", opts...)
		wg.Go(func() {
			for range 10 {
				l, err := m.Lock(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				x.enter(t, l)
				time.Sleep(100 * time.Microsecond) // work: widens the window an overlap would need
				x.leave()
				l.Unlock(t.Context())
			}
		})
	}
	wg.Wait()
	if got := x.maxSeen.Load(); got != 1 {
		t.Errorf("max concurrent holders = %d; want 1", got)
	}
}

func testFairMutexShareIsEven(t *testing.T, rdb redis.UniversalClient) {
	// Eight goroutines contend for a fair mutex for a fixed time: FIFO
	// service hands it round, so acquisition counts differ by little.
	m := lock.NewMutex(rdb, "share", lock.WithFair(), lock.WithTTL(5*time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	counts := make([]int, 8)
	var wg sync.WaitGroup
	for i := range counts {
		wg.Go(func() {
			for {
				l, err := m.Lock(ctx)
				if err != nil {
					return
				}
				counts[i]++
				time.Sleep(200 * time.Microsecond) // work
				l.Unlock(ctx)
			}
		})
	}
	wg.Wait()
	lo, hi := slices.Min(counts), slices.Max(counts)
	t.Logf("acquisitions per goroutine: %v", counts)
	if lo < 5 || float64(hi) > 1.2*float64(lo)+1 {
		t.Errorf("acquisitions per goroutine %v: max/min = %d/%d; want <= 1.2 (+1)", counts, hi, lo)
	}
}
