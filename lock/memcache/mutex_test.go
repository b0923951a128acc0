package memcache_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
	mclock "github.com/dogpile-go/dogpile/lock/memcache"
)

// fastBackoff keeps contended tests short: waiters look again within 20ms.
var fastBackoff = mclock.WithBackoff(time.Millisecond, 20*time.Millisecond)

func TestExclusiveAcrossClients(t *testing.T) {
	srv := redistest.StartMemcached(t)
	const clients, goroutines, rounds = 3, 30, 2
	var inside, maxInside, acquired atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		c := srv.Client(t)
		c.MaxIdleConns = goroutines
		m := mclock.NewMutex(c, "shared", fastBackoff)
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					l, err := m.Lock(t.Context())
					if err != nil {
						t.Error(err)
						return
					}
					n := inside.Add(1)
					for old := maxInside.Load(); n > old && !maxInside.CompareAndSwap(old, n); old = maxInside.Load() {
					}
					time.Sleep(time.Millisecond) // widen the window an overlap would need
					inside.Add(-1)
					acquired.Add(1)
					if err := l.Unlock(t.Context()); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := maxInside.Load(); got != 1 {
		t.Errorf("max concurrent holders = %d; want 1", got)
	}
	if got := acquired.Load(); got != clients*goroutines*rounds {
		t.Errorf("acquisitions = %d; want %d", got, clients*goroutines*rounds)
	}
}

func TestExpiredHolderCannotTouchSuccessor(t *testing.T) {
	srv := redistest.StartMemcached(t)
	c := srv.Client(t)
	m := mclock.NewMutex(c, "expiring", mclock.WithTTL(time.Second), fastBackoff)
	first, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The key lives 1-2 s; a successor gets it once memcached dropped it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	second, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(first.Err(), lock.ErrLost) {
		t.Errorf("expired lease Err = %v; want ErrLost", first.Err())
	}
	if err := first.Extend(t.Context(), time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("expired Extend = %v; want ErrNotHeld", err)
	}
	if err := first.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("expired Unlock = %v; want ErrNotHeld", err)
	}
	if locked, err := m.Locked(t.Context()); !locked || err != nil {
		t.Fatalf("Locked after the old holder's Unlock = %v, %v; want the successor still holding", locked, err)
	}
	if err := second.Unlock(t.Context()); err != nil {
		t.Errorf("successor Unlock = %v", err)
	}
}

func TestUnlockWithCancelledContextReleases(t *testing.T) {
	c := redistest.StartMemcached(t).Client(t)
	m := mclock.NewMutex(c, "cancelled")
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a cancelled ctx = %v; want nil", err)
	}
	if locked, err := m.Locked(t.Context()); locked || err != nil {
		t.Errorf("Locked after Unlock = %v, %v; want free", locked, err)
	}
}

func TestWaitTimeoutIsNotObtained(t *testing.T) {
	c := redistest.StartMemcached(t).Client(t)
	m := mclock.NewMutex(c, "busy", fastBackoff, mclock.WithWaitTimeout(50*time.Millisecond))
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(t.Context())
	_, err = m.Lock(t.Context())
	if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock on a busy mutex = %v; want ErrNotObtained and DeadlineExceeded", err)
	}
	if _, ok, err := m.TryLock(t.Context()); ok || err != nil {
		t.Errorf("TryLock on a busy mutex = %v, %v; want false, nil", ok, err)
	}
}

func TestServerKilledErrorsWithoutHanging(t *testing.T) {
	srv := redistest.StartMemcached(t)
	c := srv.Client(t)
	c.Timeout = 200 * time.Millisecond
	m := mclock.NewMutex(c, "doomed", mclock.WithAutoExtend(), mclock.WithTTL(time.Second))
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := m.Lock(ctx); err == nil || errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Lock on a dead server = %v; want the connection error", err)
	}
	if _, _, err := m.TryLock(ctx); err == nil {
		t.Error("TryLock on a dead server succeeded")
	}
	if _, err := m.Locked(ctx); err == nil {
		t.Error("Locked on a dead server succeeded")
	}
	select {
	case <-l.Done(): // the watchdog cannot extend: the lease is lost
	case <-ctx.Done():
		t.Fatal("Done did not close with the server dead")
	}
	// The lease was lost: ErrNotHeld, with the release's connection error.
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) || !strings.Contains(err.Error(), "release") {
		t.Errorf("Unlock on a dead server = %v; want ErrNotHeld with the connection error", err)
	}
	if ctx.Err() != nil {
		t.Error("calls on a dead server ran into the 5s deadline")
	}
}

func TestServerPausedErrorsWithoutHanging(t *testing.T) {
	srv := redistest.StartMemcached(t)
	c := srv.Client(t)
	c.Timeout = 100 * time.Millisecond
	m := mclock.NewMutex(c, "paused")
	srv.Pause()
	defer srv.Resume()
	if _, err := m.Lock(t.Context()); err == nil {
		t.Error("Lock on a paused server succeeded")
	}
}

func TestAutoExtendKeepsLeaseAndReportsLoss(t *testing.T) {
	srv := redistest.StartMemcached(t)
	c := srv.Client(t)
	// A 2 s lease, not 1 s: the watchdog then has over a second to get an
	// extension through, which a CI machine running every package at once
	// under -race once failed to give a 1 s lease (renewals every 333 ms,
	// retried until 990 ms).
	m := mclock.NewMutex(c, "watched", mclock.WithTTL(2*time.Second), mclock.WithAutoExtend())
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // past the stored expiry of 3 s
	if l.Err() != nil {
		t.Fatalf("lease ended while the watchdog ran: %v", l.Err())
	}
	if _, ok, err := m.TryLock(t.Context()); ok || err != nil {
		t.Fatalf("TryLock while the watchdog holds it = %v, %v; want false, nil", ok, err)
	}
	// Take the key away behind the holder's back: the next extension is
	// refused and the lease is lost.
	if err := c.Delete("dogpile:mutex:watched"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close after the key was deleted")
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", l.Err())
	}
	if err := l.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lease = %v; want ErrNotHeld", err)
	}
}

func TestExtendMovesExpiry(t *testing.T) {
	c := redistest.StartMemcached(t).Client(t)
	m := mclock.NewMutex(c, "extended", mclock.WithTTL(time.Second))
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(t.Context(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the first TTL's stored expiry
	if l.Err() != nil {
		t.Fatalf("Err after Extend = %v; want held", l.Err())
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("Unlock after Extend = %v", err)
	}
}

func TestBadInput(t *testing.T) {
	c := redistest.StartMemcached(t).Client(t)
	for name, m := range map[string]*mclock.Mutex{
		"empty name": mclock.NewMutex(c, ""),
	} {
		if _, err := m.Lock(t.Context()); !errors.Is(err, mclock.ErrInvalid) {
			t.Errorf("%s: Lock = %v; want ErrInvalid", name, err)
		}
		if _, _, err := m.TryLock(t.Context()); !errors.Is(err, mclock.ErrInvalid) {
			t.Errorf("%s: TryLock = %v; want ErrInvalid", name, err)
		}
		if _, err := m.Locked(t.Context()); !errors.Is(err, mclock.ErrInvalid) {
			t.Errorf("%s: Locked = %v; want ErrInvalid", name, err)
		}
		if err := mclock.Do(t.Context(), c, "", func(context.Context, *mclock.Lease) error { return nil }); !errors.Is(err, mclock.ErrInvalid) {
			t.Errorf("Do with an empty name = %v; want ErrInvalid", err)
		}
	}
	l, err := mclock.NewMutex(c, "ok").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(t.Context())
	if err := l.Extend(t.Context(), 10*time.Millisecond); !errors.Is(err, mclock.ErrInvalid) {
		t.Errorf("Extend(10ms) = %v; want ErrInvalid", err)
	}
	var nilLease *mclock.Lease
	if err := nilLease.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("nil Lease Unlock = %v; want ErrNotHeld", err)
	}
	for name, f := range map[string]func(){
		// Bad options panic, as lock's and the cache's do.
		"ttl below 1s":       func() { mclock.WithTTL(999 * time.Millisecond) },
		"ttl above 30 days":  func() { mclock.WithTTL(31 * 24 * time.Hour) },
		"ttl of 30 days":     func() { mclock.WithTTL(30 * 24 * time.Hour) }, // rounded up: an absolute time in 1970
		"zero backoff":       func() { mclock.WithBackoff(0, time.Second) },
		"inverted backoff":   func() { mclock.WithBackoff(time.Second, time.Millisecond) },
		"negative wait time": func() { mclock.WithWaitTimeout(-time.Second) },
		"NewMutex(nil)":      func() { mclock.NewMutex(nil, "x") },
		"Do(nil fn)":         func() { _ = mclock.Do(t.Context(), c, "x", nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "(a programmer error)") {
					t.Errorf("%s panicked with %v; want a programmer-error panic", name, r)
				}
			}()
			f()
		}()
	}
}

func TestNamesThatAreNoKeys(t *testing.T) {
	c := redistest.StartMemcached(t).Client(t)
	long := strings.Repeat("n", 300)
	names := []string{"with space", "tab\there", "ctl\x01", long, long + "x", "ünï"}
	var held []*mclock.Lease
	for _, name := range names {
		l, ok, err := mclock.NewMutex(c, name).TryLock(t.Context())
		if !ok || err != nil {
			t.Fatalf("TryLock(%q) = %v, %v; want a distinct lock per name", name, ok, err)
		}
		held = append(held, l)
		if _, ok, _ := mclock.NewMutex(c, name).TryLock(t.Context()); ok {
			t.Errorf("%q locked twice", name)
		}
	}
	for _, l := range held {
		if err := l.Unlock(t.Context()); err != nil {
			t.Error(err)
		}
	}
}

func TestErrorsAreLocksOwn(t *testing.T) {
	if mclock.ErrNotHeld != lock.ErrNotHeld || mclock.ErrNotObtained != lock.ErrNotObtained ||
		mclock.ErrLost != lock.ErrLost || mclock.ErrInvalid != lock.ErrInvalid {
		t.Error("sentinels differ from lock's: errors.Is would not work across stores")
	}
}

func TestDoCancelsOnLossAndReleases(t *testing.T) {
	c := redistest.StartMemcached(t).Client(t)
	err := mclock.Do(t.Context(), c, "block", func(ctx context.Context, _ *mclock.Lease) error {
		if err := c.Delete("dogpile:mutex:block"); err != nil {
			return err
		}
		<-ctx.Done() // the watchdog's next extension is refused
		if !errors.Is(context.Cause(ctx), lock.ErrLost) {
			t.Errorf("cause = %v; want ErrLost", context.Cause(ctx))
		}
		return nil
	}, mclock.WithTTL(time.Second))
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Do after a lost lease = %v; want ErrNotHeld", err)
	}
	if err := mclock.Do(t.Context(), c, "block", func(context.Context, *mclock.Lease) error { return nil }); err != nil {
		t.Errorf("Do = %v", err)
	}
	if _, err := c.Get("dogpile:mutex:block"); !errors.Is(err, gomemcache.ErrCacheMiss) {
		t.Errorf("key after Do = %v; want released", err)
	}
}

// TestGrantSlowerThanTTL: an add whose reply comes later than the TTL is
// no lease: Lock takes the lock again once replies are on time, rather
// than return a lease already lost (as the lock package's primitives).
func TestGrantSlowerThanTTL(t *testing.T) {
	srv := redistest.StartMemcached(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	c := gomemcache.New(proxy.Addr())
	c.Timeout = 10 * time.Second
	t.Cleanup(func() { _ = c.Close() })
	m := mclock.NewMutex(c, "slow", mclock.WithTTL(time.Second), fastBackoff)
	warm, err := m.Lock(t.Context()) // opens the connection
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	const delay = 1200 * time.Millisecond
	proxy.DelayReplies(delay)
	lifted := time.AfterFunc(2*delay, func() { proxy.DelayReplies(0) })
	defer lifted.Stop()
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Errorf("Lock returned a lease already lost (%v): its reply came %v after the request, TTL 1s", err, delay)
	}
	_ = l.Unlock(context.Background())
}

// TestUnlockAfterLossIsNotHeld: a lease that reported itself lost (its
// safe deadline passed) returns ErrNotHeld from Unlock although memcached
// still holds its token (here kept alive by a Touch from outside), and the
// token is deleted all the same.
func TestUnlockAfterLossIsNotHeld(t *testing.T) {
	srv := redistest.StartMemcached(t)
	c := srv.Client(t)
	l, err := mclock.NewMutex(c, "lost", mclock.WithTTL(time.Second)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Touch("dogpile:mutex:lost", 60); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the lease to report itself lost", func() bool { return errors.Is(l.Err(), lock.ErrLost) })
	if err := l.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock of a lost lease = %v; want ErrNotHeld", err)
	}
	if _, err := c.Get("dogpile:mutex:lost"); !errors.Is(err, gomemcache.ErrCacheMiss) {
		t.Errorf("the lost lease's key after Unlock: %v; want it deleted", err)
	}
}
