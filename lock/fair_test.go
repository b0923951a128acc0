package lock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/lock"
)

// Fair mutexes (WithFair), in the semaphore suite: a fair mutex is a
// semaphore of one permit, served in arrival order.

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
