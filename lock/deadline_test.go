package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
	"github.com/redis/go-redis/v9"
)

// TestDeadlineHoldsWhileRedisPaused: Redis is SIGSTOPped for 2 s under a
// load of every primitive's blocking acquire (and Unlock), each call with a
// 500 ms deadline, on a client with ContextTimeoutEnabled. No call may
// return later than its deadline plus 50 ms: a rollback after a timed-out
// acquire must not run inline on a detached context. Once Redis is back,
// the rollbacks finish and leave no lock behind.
func TestDeadlineHoldsWhileRedisPaused(t *testing.T) {
	const (
		deadline = 500 * time.Millisecond
		slack    = 50 * time.Millisecond
		pause    = 2 * time.Second
	)
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	opts := []lock.Option{lock.WithTTL(time.Minute)}
	calls := map[string]func(ctx context.Context) (*lock.Lease, error){
		"Mutex.Lock":      lock.NewMutex(rdb, "dl", opts...).Lock,
		"fair Mutex.Lock": lock.NewMutex(rdb, "dlfair", append(opts, lock.WithFair())...).Lock,
		"Semaphore.Acquire": func(ctx context.Context) (*lock.Lease, error) {
			return lock.NewSemaphore(rdb, "dl", 2, opts...).Acquire(ctx, 1)
		},
		"RWMutex.RLock":   lock.NewRWMutex(rdb, "dl", opts...).RLock,
		"RWMutex.Lock":    lock.NewRWMutex(rdb, "dlw", opts...).Lock,
		"MultiMutex.Lock": lock.NewMultiMutex(rdb, []string{"dlm1", "dlm2"}, opts...).Lock,
		"Redlock.Lock":    lock.NewRedlock([]redis.UniversalClient{rdb}, "dl", opts...).Lock,
	}
	var (
		mu      sync.Mutex
		worst   = map[string]time.Duration{}
		timeout atomic.Int64 // calls that ended with their deadline
	)
	record := func(op string, start time.Time, ctx context.Context) {
		late := time.Since(start) - deadline
		if ctx.Err() == nil {
			return // returned before its deadline
		}
		timeout.Add(1)
		mu.Lock()
		worst[op] = max(worst[op], late)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for name, call := range calls {
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					ctx, cancel := context.WithTimeout(context.Background(), deadline)
					l, err := call(ctx)
					record(name, start, ctx)
					if err == nil {
						time.Sleep(time.Millisecond)
						start = time.Now()
						_ = l.Unlock(ctx)
						record(name+" Unlock", start, ctx)
					}
					cancel()
				}
			})
		}
	}
	// A control: how late a bare context deadline is noticed under the same
	// load. On a loaded machine (-race, other packages' tests) the runtime
	// itself wakes goroutines late, and a call that ends at its deadline
	// passes through a few goroutines (go-redis's, ours), each woken late:
	// the bound allows twice the control's lag on top of the slack. An
	// inline rollback (the defect this catches) costs up to its own 3 s
	// timeout, far past that.
	var control atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				<-ctx.Done()
				late := int64(time.Since(start) - deadline)
				for c := control.Load(); late > c && !control.CompareAndSwap(c, late); c = control.Load() {
				}
				cancel()
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // load before the fault
	srv.Pause()
	time.Sleep(pause)
	srv.Resume()
	time.Sleep(200 * time.Millisecond) // and after it
	close(stop)
	wg.Wait()

	if timeout.Load() == 0 {
		t.Fatal("no call hit its deadline: the pause did not bite")
	}
	lag := time.Duration(control.Load())
	for op, late := range worst {
		if late > slack+2*lag {
			t.Errorf("%s returned %v after its deadline; want <= %v + twice the runtime's own lag %v", op, late.Round(time.Millisecond), slack, lag.Round(time.Millisecond))
		}
	}
	t.Logf("%d calls hit their deadline; latest return past it: %v (a bare context deadline: %v late)", timeout.Load(), fmtWorst(worst), lag.Round(time.Millisecond))

	// The rollbacks of the acquires that timed out run in the background,
	// bounded; with Redis back they finish and every lock is free.
	lock.WaitRollbacks()
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		l, err := call(ctx)
		if err != nil {
			t.Errorf("%s after the pause: %v; want the lock (nothing left behind)", name, err)
		} else if err := l.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("%s Unlock: %v", name, err)
		}
		cancel()
	}
}

func fmtWorst(m map[string]time.Duration) string {
	s := ""
	for op, d := range m {
		s += fmt.Sprintf(" %s %v;", op, d.Round(time.Millisecond))
	}
	return s
}
