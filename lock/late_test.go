package lock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestGrantSlowerThanTTL: a grant whose reply comes later than the lease's
// TTL is no lease: the lock is taken again, or not at all, but a caller
// never gets a lease that was lost before it returned (whose holder would
// enter its section while another holds the lock). Found by the torture
// run (seed 4874054713374990276): a fair lease whose reply a slow network
// held back 1.26 s, Done closed 59 µs after Lock returned, while a plain
// holder was inside.
func TestGrantSlowerThanTTL(t *testing.T) {
	const ttl, delay = 200 * time.Millisecond, 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		lock func(rdb *redis.Client) func(context.Context) (*lock.Lease, error)
	}{
		{"Mutex", func(rdb *redis.Client) func(context.Context) (*lock.Lease, error) {
			return lock.NewMutex(rdb, "slow", lock.WithTTL(ttl)).Lock
		}},
		{"FairMutex", func(rdb *redis.Client) func(context.Context) (*lock.Lease, error) {
			return lock.NewMutex(rdb, "slow", lock.WithTTL(ttl), lock.WithFair()).Lock
		}},
		{"Semaphore", func(rdb *redis.Client) func(context.Context) (*lock.Lease, error) {
			s := lock.NewSemaphore(rdb, "slow", 2, lock.WithTTL(ttl))
			return func(ctx context.Context) (*lock.Lease, error) { return s.Acquire(ctx, 1) }
		}},
		{"RWMutex", func(rdb *redis.Client) func(context.Context) (*lock.Lease, error) {
			return lock.NewRWMutex(rdb, "slow", lock.WithTTL(ttl)).Lock
		}},
		{"MultiMutex", func(rdb *redis.Client) func(context.Context) (*lock.Lease, error) {
			return lock.NewMultiMutex(rdb, []string{"slow-a", "slow-b"}, lock.WithTTL(ttl)).Lock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			proxy := redistest.StartProxy(t, srv.Addr())
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
			defer rdb.Close()
			acquire := tc.lock(rdb)
			warm, err := acquire(t.Context()) // loads the scripts, opens the connection
			if err != nil {
				t.Fatal(err)
			}
			warm.Unlock(t.Context())

			proxy.DelayReplies(delay)
			lifted := time.AfterFunc(3*delay, func() { proxy.DelayReplies(0) })
			defer lifted.Stop()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			l, err := acquire(ctx)
			if err != nil {
				t.Fatalf("Lock once the delay is lifted: %v", err)
			}
			if err := l.Err(); err != nil {
				t.Errorf("Lock returned a lease already lost (%v): its reply came %v after the request, TTL %v", err, delay, ttl)
			}
			l.Unlock(context.Background())
		})
	}
}

// TestUpgradeSlowerThanTTL: an Upgrade whose reply comes later than the
// TTL hands out no write lease already lost: it fails with ErrLost, the
// read lease has ended, and the write lock it took is undone, so a writer
// gets the lock once replies are on time.
func TestUpgradeSlowerThanTTL(t *testing.T) {
	const ttl, delay = 200 * time.Millisecond, 300 * time.Millisecond
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	defer rdb.Close()
	rw := lock.NewRWMutex(rdb, "slow", lock.WithTTL(ttl))
	warm, err := rw.RLock(t.Context()) // loads the scripts, opens the connection
	if err != nil {
		t.Fatal(err)
	}
	if w, err := rw.Upgrade(t.Context(), warm); err != nil {
		t.Fatal(err)
	} else {
		w.Unlock(t.Context())
	}
	r, err := rw.RLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	proxy.DelayReplies(delay)
	w, err := rw.Upgrade(t.Context(), r)
	proxy.DelayReplies(0)
	if !errors.Is(err, lock.ErrLost) || w != nil {
		t.Fatalf("Upgrade answered %v after the request, TTL %v: lease %t, err %v; want no lease and ErrLost", delay, ttl, w != nil, err)
	}
	if n := strings.Count(err.Error(), "lock:"); n != 1 {
		t.Errorf("%q has %d \"lock:\"; want 1 (issue 43)", err, n)
	}
	if r.Err() == nil {
		t.Error("the read lease is still held after its upgrade ran")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the late upgrade: %v", err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Lock returned a lease already lost: %v", err)
	}
	l.Unlock(context.Background())
}

// TestTryGrantSlowerThanTTL: a single attempt granted too late (here its
// request waited in the client, as in a GC pause or a pool's wait, so the
// lock is fresh when the late reply arrives) reports the lock busy and
// undoes what it was granted, instead of leaving it held for a TTL by
// nobody.
func TestTryGrantSlowerThanTTL(t *testing.T) {
	const ttl, delay = 2 * time.Second, 2500 * time.Millisecond
	type try = func(context.Context) (*lock.Lease, bool, error)
	for _, tc := range []struct {
		name string
		// try is the single attempt; free, one that a grant left behind
		// would bar.
		make func(rdb *redis.Client) (try, free try)
	}{
		{"FairMutex", func(rdb *redis.Client) (try, try) {
			m := lock.NewMutex(rdb, "slow", lock.WithTTL(ttl), lock.WithFair())
			return m.TryLock, m.TryLock
		}},
		{"Semaphore", func(rdb *redis.Client) (try, try) {
			s := lock.NewSemaphore(rdb, "slow", 1, lock.WithTTL(ttl))
			f := func(ctx context.Context) (*lock.Lease, bool, error) { return s.TryAcquire(ctx, 1) }
			return f, f
		}},
		{"RWMutex.TryRLock", func(rdb *redis.Client) (try, try) {
			rw := lock.NewRWMutex(rdb, "slow", lock.WithTTL(ttl))
			return rw.TryRLock, rw.TryLock
		}},
		{"RWMutex.TryLock", func(rdb *redis.Client) (try, try) {
			rw := lock.NewRWMutex(rdb, "slow", lock.WithTTL(ttl))
			return rw.TryLock, rw.TryLock
		}},
		{"MultiMutex", func(rdb *redis.Client) (try, try) {
			mm := lock.NewMultiMutex(rdb, []string{"slow-a", "slow-b"}, lock.WithTTL(ttl))
			return mm.TryLock, mm.TryLock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			rdb := srv.Client(t)
			attempt, free := tc.make(rdb)
			warm, ok, err := attempt(t.Context()) // loads the scripts, opens the connection
			if err != nil || !ok {
				t.Fatalf("first attempt = %v, %v", ok, err)
			}
			warm.Unlock(t.Context())
			var stall atomic.Bool
			stall.Store(true)
			pause := func() {
				if stall.CompareAndSwap(true, false) {
					time.Sleep(delay) // before the request leaves: granted fresh, late
				}
			}
			rdb.AddHook(redistest.Hook{
				Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
					pause()
					return next(ctx, cmd)
				},
				Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
					pause()
					return next(ctx, cmds)
				},
			})
			if l, ok, err := attempt(t.Context()); err != nil || ok {
				if ok {
					l.Unlock(t.Context())
				}
				t.Fatalf("an attempt granted %v after it was sent, TTL %v = %v, %v; want busy", delay, ttl, ok, err)
			}
			wantUndone(t, free, ttl/2)
		})
	}
}

// TestWaitGrantSlowerThanTTLThenLeave: a waiting call granted too late
// (see TestGrantSlowerThanTTL) comes back at once with the same token to
// renew what it was granted; one whose context ends before it comes back
// undoes it, as after any attempt whose reply it did not wait for. Left
// in place, it would keep the lock from everyone for a TTL. The call waits
// for a holder first, so that it is subscribed when its late reply comes
// and does not try again at once (that attempt, on a cancelled context,
// would undo the grant by another path).
func TestWaitGrantSlowerThanTTLThenLeave(t *testing.T) {
	const ttl, delay = 2 * time.Second, 2500 * time.Millisecond
	type acquire = func(context.Context) (*lock.Lease, error)
	type try = func(context.Context) (*lock.Lease, bool, error)
	server := func(t *testing.T) redis.UniversalClient { return redistest.StartServer(t).Client(t) }
	ring := func(t *testing.T) redis.UniversalClient { return redistest.StartRing(t, 3).Client(t) }
	names := []string{"slow-a", "slow-b", "slow-c", "slow-d"} // on a Ring of 3, a group per name
	for _, tc := range []struct {
		name   string
		client func(*testing.T) redis.UniversalClient
		// wait is the blocking call; free, a single attempt that what the
		// late grant left behind would bar, and which holds what wait needs.
		make func(rdb redis.UniversalClient) (wait acquire, free try)
	}{
		{"MultiMutex", server, func(rdb redis.UniversalClient) (acquire, try) {
			mm := lock.NewMultiMutex(rdb, names, lock.WithTTL(ttl))
			return mm.Lock, mm.TryLock
		}},
		{"MultiMutex/Ring", ring, func(rdb redis.UniversalClient) (acquire, try) {
			mm := lock.NewMultiMutex(rdb, names, lock.WithTTL(ttl))
			return mm.Lock, mm.TryLock
		}},
		{"RWMutex.RLock", server, func(rdb redis.UniversalClient) (acquire, try) {
			rw := lock.NewRWMutex(rdb, "slow", lock.WithTTL(ttl))
			return rw.RLock, rw.TryLock
		}},
		{"RWMutex.Lock", server, func(rdb redis.UniversalClient) (acquire, try) {
			rw := lock.NewRWMutex(rdb, "slow", lock.WithTTL(ttl))
			return rw.Lock, rw.TryLock
		}},
		{"Semaphore", server, func(rdb redis.UniversalClient) (acquire, try) {
			s := lock.NewSemaphore(rdb, "slow", 1, lock.WithTTL(ttl))
			return func(ctx context.Context) (*lock.Lease, error) { return s.Acquire(ctx, 1) },
				func(ctx context.Context) (*lock.Lease, bool, error) { return s.TryAcquire(ctx, 1) }
		}},
		{"FairMutex", server, func(rdb redis.UniversalClient) (acquire, try) {
			m := lock.NewMutex(rdb, "slow", lock.WithTTL(ttl), lock.WithFair())
			return m.Lock, m.TryLock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.client(t)
			wait, free := tc.make(rdb)
			err := grantLate(t, rdb, wait, free, delay, late{after: func(leave context.CancelFunc) { leave() }})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("a call that left after a late grant = %v; want context.Canceled", err)
			}
			wantUndone(t, free, ttl/2)
		})
	}
}

// late says what grantLate does around the stalled request of its call.
type late struct {
	// intercept, if set, sees each request of the call before it is
	// stalled or sent, and answers it in the server's place with an error
	// other than nil.
	intercept func(cmd redis.Cmder) error
	// after, if set, is called once the stalled request's reply is in,
	// before the call goes on, with what cancels the call's context.
	after func(leave context.CancelFunc)
}

// grantLate runs wait on rdb (once first, to load the scripts and open the
// connections) while a lease of free holds what it needs. The call's first
// attempt meets that holder, so it subscribes; then the holder leaves, and
// the call's next request is held back delay before it leaves: it is
// granted fresh, and its reply comes late. grantLate returns the call's
// error once it returned, having given back any lease it got.
func grantLate(t *testing.T, rdb redis.UniversalClient, wait func(context.Context) (*lock.Lease, error), free func(context.Context) (*lock.Lease, bool, error), delay time.Duration, l late) error {
	t.Helper()
	warm, err := wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(t.Context())
	holder, ok, err := free(t.Context())
	if err != nil || !ok {
		t.Fatalf("the holder's attempt = %v, %v", ok, err)
	}
	ctx, leave := context.WithCancel(context.WithValue(t.Context(), lateKey{}, true))
	defer leave()
	var armed, stall atomic.Bool
	stall.Store(true)
	refused, once := make(chan struct{}), sync.Once{}
	rdb.AddHook(redistest.Hook{
		Process: func(hctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if hctx.Value(lateKey{}) == nil || redistest.IsHandshake(cmd) {
				return next(hctx, cmd)
			}
			if l.intercept != nil {
				if err := l.intercept(cmd); err != nil {
					return err
				}
			}
			if armed.Load() && stall.CompareAndSwap(true, false) {
				time.Sleep(delay) // before the request leaves: granted fresh, late
				err := next(hctx, cmd)
				if l.after != nil {
					l.after(leave)
				}
				return err
			}
			err := next(hctx, cmd)
			once.Do(func() { close(refused) })
			return err
		},
	})
	done := make(chan error, 1)
	go func() {
		lease, err := wait(ctx)
		if lease != nil {
			lease.Unlock(t.Context())
		}
		done <- err
	}()
	<-refused // its first attempt met the holder: it subscribes before the next
	armed.Store(true)
	holder.Unlock(t.Context())
	err = <-done
	if stall.Load() {
		t.Fatal("no request of the call was stalled")
	}
	return err
}

// wantUndone fails t unless free, a single attempt that what a late grant
// left behind would bar, succeeds within d.
func wantUndone(t *testing.T, free func(context.Context) (*lock.Lease, bool, error), d time.Duration) {
	t.Helper()
	undone := redistest.Within(d, func() bool {
		l, ok, err := free(t.Context())
		if ok {
			l.Unlock(t.Context())
		}
		return err == nil && ok
	})
	if !undone {
		t.Errorf("the late grant still holds the lock %v later; want it undone at once", d)
	}
}

// lateKey marks the context of the call whose request is stalled.
type lateKey struct{}

// TestMultiMutexLateGrantThenFailure: on a Ring, every name of a
// MultiMutex is a group of its own. After an attempt granted too late,
// which holds every group, the next attempt fails at the first group: it
// undoes every group, not only the ones it took itself, or the names
// after the first would stay held for a TTL by a call that returned an
// error.
func TestMultiMutexLateGrantThenFailure(t *testing.T) {
	t.Parallel() // its own ring; mostly waiting out a stalled request
	const ttl, delay = 2 * time.Second, 2500 * time.Millisecond
	rdb := redistest.StartRing(t, 3).Client(t)
	mm := lock.NewMultiMutex(rdb, []string{"slow-a", "slow-b", "slow-c", "slow-d"}, lock.WithTTL(ttl))
	injected := errors.New("injected failure")
	var fail atomic.Bool
	err := grantLate(t, rdb, mm.Lock, mm.TryLock, delay, late{
		intercept: func(cmd redis.Cmder) error {
			if fail.Load() && slices.Contains(cmd.Args(), any("dogpile:mutex:{slow-a}")) && fail.CompareAndSwap(true, false) {
				return injected // the next attempt's first group
			}
			return nil
		},
		after: func(context.CancelFunc) { fail.Store(true) },
	})
	if !errors.Is(err, injected) {
		t.Fatalf("Lock = %v; want the injected failure", err)
	}
	if fail.Load() {
		t.Fatal("the injected failure did not happen")
	}
	wantUndone(t, mm.TryLock, ttl/2)
}
