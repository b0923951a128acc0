package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// rwChecker records readers and writers inside the critical section.
type rwChecker struct {
	state      atomic.Int64 // readers, or -1 for a writer
	maxReaders atomic.Int64
	bad        atomic.Int64 // a reader met a writer, or two writers met
}

func (c *rwChecker) rlock() {
	for {
		s := c.state.Load()
		if s < 0 {
			c.bad.Add(1)
			return
		}
		if c.state.CompareAndSwap(s, s+1) {
			for m := c.maxReaders.Load(); s+1 > m && !c.maxReaders.CompareAndSwap(m, s+1); m = c.maxReaders.Load() {
			}
			return
		}
	}
}

func (c *rwChecker) runlock() { c.state.Add(-1) }

func (c *rwChecker) lock() {
	if !c.state.CompareAndSwap(0, -1) {
		c.bad.Add(1)
	}
}

func (c *rwChecker) unlock() { c.state.CompareAndSwap(-1, 0) }

func testRWInvariant(t *testing.T, clients []redis.UniversalClient, goroutines, rounds int) {
	var c rwChecker
	var wg sync.WaitGroup
	for _, cl := range clients {
		for i := range goroutines {
			rw := lock.NewRWMutex(cl, "doc", lock.WithTTL(5*time.Second))
			wg.Go(func() {
				for range rounds {
					if i%4 == 0 {
						l, err := rw.Lock(t.Context())
						if err != nil {
							t.Error(err)
							return
						}
						c.lock()
						time.Sleep(200 * time.Microsecond) // work: widens the window an overlap would need
						c.unlock()
						l.Unlock(t.Context())
					} else {
						l, err := rw.RLock(t.Context())
						if err != nil {
							t.Error(err)
							return
						}
						c.rlock()
						time.Sleep(time.Millisecond) // work, long enough for readers to overlap
						c.runlock()
						l.Unlock(t.Context())
					}
				}
			})
		}
	}
	wg.Wait()
	if n := c.bad.Load(); n != 0 {
		t.Errorf("%d overlaps of a writer with a reader or another writer", n)
	}
	t.Logf("max readers at once: %d", c.maxReaders.Load())
}

// The reader/writer suite runs on every kind of deployment.
var rwSuite = redistest.Suite{
	{Name: "Invariant", Test: func(t *testing.T, b redistest.Backend) { testRWInvariant(t, b.Clients(t, 2), 8, 4) }},
	{Name: "ReadersOverlap", Test: onClient(testRWMutexReadersOverlap)},
	{Name: "WriterNotStarved", Test: onClient(testRWMutexWriterNotStarved)},
	{Name: "ReaderNotStarvedByWriters", Test: onClient(testRWMutexReaderNotStarvedByWriters)},
	{Name: "CancelledReaderKeepsNoWriterOut", Test: onClient(testRWMutexCancelledReaderKeepsNoWriterOut)},
	{Name: "WaitingWriterBlocksNewReaders", Test: onClient(testRWMutexWaitingWriterBlocksNewReaders)},
	{Name: "Upgrade", Test: onClient(testRWMutexUpgrade)},
	{Name: "DoubleUnlockAndCancelledContext", Test: onClient(testRWMutexDoubleUnlockAndCancelledContext)},
	{Name: "ReaderLeasesExtendAlone", Test: onClient(testRWMutexReaderLeasesExtendAlone)},
	{Name: "Locked", Test: onClient(testRWMutexLocked)},
}

func TestRWMutex(t *testing.T) { rwSuite.Run(t) }

func testRWMutexReadersOverlap(t *testing.T, rdb redis.UniversalClient) {
	// potlock's "read-write" lock admits one reader at a time. Here five
	// readers must all be inside at once, or this test times out.
	rw := lock.NewRWMutex(rdb, "shared")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var inside sync.WaitGroup
	inside.Add(5)
	all := make(chan struct{})
	go func() { inside.Wait(); close(all) }()
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			l, err := rw.RLock(ctx)
			if err != nil {
				t.Error(err)
				inside.Done()
				return
			}
			inside.Done()
			select {
			case <-all:
			case <-ctx.Done():
				t.Error("readers did not all get in together")
			}
			l.Unlock(t.Context())
		})
	}
	wg.Wait()
}

func testRWMutexWriterNotStarved(t *testing.T, rdb redis.UniversalClient) {
	// Four readers keep the lock continuously read-held (their holds
	// overlap). A writer must still get in, after the readers already
	// inside leave, not after the readers stop.
	rw := lock.NewRWMutex(rdb, "busy", lock.WithTTL(5*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := rw.RLock(ctx)
				if err != nil {
					return
				}
				reads.Add(1)
				time.Sleep(20 * time.Millisecond) // a read hold, overlapping the others'
				l.Unlock(context.Background())
			}
		})
	}
	redistest.Eventually(t, "8 reads: the readers in full swing", func() bool { return reads.Load() >= 8 })
	start := time.Now()
	w, err := rw.Lock(t.Context())
	waited := time.Since(start)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	w.Unlock(t.Context())
	wg.Wait()
	t.Logf("writer waited %v under continuous readers", waited)
	if waited > time.Second {
		t.Errorf("writer waited %v; want about one read hold (20ms)", waited)
	}
}

func testRWMutexReaderNotStarvedByWriters(t *testing.T, rdb redis.UniversalClient) {
	// Two writers take turns back to back, so a writer always waits. A
	// reader must still get in at the next writer's unlock (as with
	// sync.RWMutex), not only when the writers stop.
	rw := lock.NewRWMutex(rdb, "hot", lock.WithTTL(5*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var writes atomic.Int64
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := rw.Lock(ctx)
				if err != nil {
					return
				}
				writes.Add(1)
				time.Sleep(10 * time.Millisecond) // a write hold
				l.Unlock(context.Background())
			}
		})
	}
	redistest.Eventually(t, "6 writes: the writers in full swing", func() bool { return writes.Load() >= 6 })
	var worst time.Duration
	for range 10 {
		start := time.Now()
		r, err := rw.RLock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		r.Unlock(t.Context())
	}
	cancel()
	wg.Wait()
	t.Logf("reader waited at most %v under writers taking turns", worst)
	if worst > 250*time.Millisecond {
		t.Errorf("reader waited %v; want about one write hold (10ms)", worst)
	}
}

func testRWMutexCancelledReaderKeepsNoWriterOut(t *testing.T, rdb redis.UniversalClient) {
	rw := lock.NewRWMutex(rdb, "gone", lock.WithTTL(time.Minute))
	w, err := rw.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error)
	go func() {
		_, err := rw.RLock(ctx)
		errc <- err
	}()
	waitQueue(t, rdb, "dogpile:rw:{gone}:rq", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("RLock = %v; want ErrNotObtained and context.Canceled", err)
	}
	lock.WaitRollbacks()
	w.Unlock(t.Context()) // would admit the waiting reader, had it stayed
	if _, ok, err := rw.TryLock(t.Context()); !ok || err != nil {
		t.Errorf("TryLock after the waiting reader left = %v, %v; want true", ok, err)
	}
}

func testRWMutexWaitingWriterBlocksNewReaders(t *testing.T, rdb redis.UniversalClient) {
	rw := lock.NewRWMutex(rdb, "pending", lock.WithTTL(time.Minute))
	r, err := rw.RLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error)
	go func() {
		_, err := rw.Lock(ctx)
		errc <- err
	}()
	waitQueue(t, rdb, "dogpile:rw:{pending}:ww", 1)
	if _, ok, err := rw.TryRLock(t.Context()); ok || err != nil {
		t.Errorf("TryRLock with a writer waiting = %v, %v; want false, nil", ok, err)
	}
	cancel() // the writer gives up: readers are welcome again at once
	if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Lock = %v; want ErrNotObtained and context.Canceled", err)
	}
	lock.WaitRollbacks()
	l, ok, err := rw.TryRLock(t.Context())
	if !ok || err != nil {
		t.Errorf("TryRLock after the writer gave up = %v, %v; want true", ok, err)
	}
	l.Unlock(t.Context())
	r.Unlock(t.Context())
	if _, ok, _ := rw.TryLock(t.Context()); !ok {
		t.Error("TryLock with no readers left failed")
	}
}

func testRWMutexDoubleUnlockAndCancelledContext(t *testing.T, rdb redis.UniversalClient) {
	rw := lock.NewRWMutex(rdb, "twice")
	ctx, cancel := context.WithCancel(t.Context())
	r, _ := rw.RLock(ctx)
	cancel()
	if err := r.Unlock(ctx); err != nil {
		t.Errorf("RUnlock with a cancelled ctx = %v", err)
	}
	if err := r.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second RUnlock = %v; want ErrNotHeld", err)
	}
	w, ok, _ := rw.TryLock(t.Context())
	if !ok {
		t.Fatal("TryLock after the reader left failed")
	}
	if err := w.Unlock(t.Context()); err != nil {
		t.Error(err)
	}
	if err := w.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Unlock = %v; want ErrNotHeld", err)
	}
}

func testRWMutexReaderLeasesExtendAlone(t *testing.T, rdb redis.UniversalClient) {
	// Reader leases are separate: one reader's watchdog does not keep a
	// dead reader alive, and Extend works per reader.
	ctx := t.Context()
	rw := lock.NewRWMutex(rdb, "ext", lock.WithTTL(80*time.Millisecond))
	short, _ := rw.RLock(ctx)
	long, _ := rw.RLock(ctx)
	if err := long.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	<-short.Done()
	if err := short.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Extend of an expired reader = %v; want ErrNotHeld", err)
	}
	if ttl, err := long.TTL(ctx); err != nil || ttl < 50*time.Second {
		t.Errorf("extended reader TTL = %v, %v", ttl, err)
	}
	long.Unlock(ctx)
	// short's Done closed at its safe deadline, a little before Redis
	// drops it: Lock waits out that margin.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := rw.Lock(wctx); err != nil {
		t.Errorf("Lock after both readers were gone = %v", err)
	}
}
