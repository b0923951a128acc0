package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/wake"
	"github.com/dogpile-go/dogpile/lock"
)

// exclusion checks that holders never overlap and that fencing numbers
// strictly increase in the order the lock was actually held.
type exclusion struct {
	holders   atomic.Int32
	maxSeen   atomic.Int32
	mu        sync.Mutex
	lastFence int64
	acquired  int
}

func (x *exclusion) enter(t *testing.T, l *lock.Lease) {
	t.Helper()
	n := x.holders.Add(1)
	for {
		m := x.maxSeen.Load()
		if n <= m || x.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if f := l.Fence(); f <= x.lastFence {
		t.Errorf("fence %d after %d; want strictly increasing", f, x.lastFence)
	} else {
		x.lastFence = f
	}
	x.acquired++
}

func (x *exclusion) leave() { x.holders.Add(-1) }

func testExclusive(t *testing.T, clients []redis.UniversalClient, goroutines, rounds int) {
	var x exclusion
	var wg sync.WaitGroup
	for _, c := range clients {
		for range goroutines {
			m := lock.NewMutex(c, "exclusive", lock.WithTTL(5*time.Second))
			wg.Go(func() {
				for range rounds {
					l, err := m.Lock(t.Context())
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					x.enter(t, l)
					time.Sleep(50 * time.Microsecond) // work: widens the window an overlap would need
					x.leave()
					if err := l.Unlock(t.Context()); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := x.maxSeen.Load(); got != 1 {
		t.Errorf("max concurrent holders = %d; want 1", got)
	}
	if want := len(clients) * goroutines * rounds; x.acquired != want {
		t.Errorf("acquisitions = %d; want %d", x.acquired, want)
	}
}

// The mutex suite runs on every kind of deployment: a plain server, a
// 3-master cluster (where every script must stay within one hash slot), a
// 2-shard ring and a sentinel-monitored master.
var mutexSuite = redistest.Suite{
	{Name: "NeverTwoHolders", Test: func(t *testing.T, b redistest.Backend) { testExclusive(t, b.Clients(t, 3), 100, 3) }},
	{Name: "OverlappingCallsShareRoundTrips", Test: onClient(testOverlappingCallsShareRoundTrips)},
	{Name: "UnlockAfterExpiryIsNotHeld", Test: onClient(testUnlockAfterExpiryIsNotHeld)},
	{Name: "FencingOutlivesLocks", Test: onClient(testFencingOutlivesLocks)},
	{Name: "AutoExtendKeepsLeaseAndReportsLoss", Test: onClient(testAutoExtendKeepsLeaseAndReportsLoss)},
	{Name: "MaxHoldStopsAutoExtend", Test: onClient(testMaxHoldStopsAutoExtend)},
	{Name: "LockCancelledWhileWaiting", Test: onClient(testLockCancelledWhileWaiting)},
	{Name: "WaiterWokenByRelease", Test: onClient(testWaiterWokenByRelease)},
	{Name: "ExpiryFreesWaiterWithoutMessage", Test: onClient(testExpiryFreesWaiterWithoutMessage)},
	{Name: "UnlockWithCancelledContext", Test: onClient(testUnlockWithCancelledContext)},
	{Name: "SurvivesScriptFlush", Test: onClient(testSurvivesScriptFlush)},
	{Name: "DoReleasesOnPanic", Test: onClient(testDoReleasesOnPanic)},
	{Name: "DoCancelsFnWhenLeaseLost", Test: onClient(testDoCancelsFnWhenLeaseLost)},
	{Name: "DoGivesTheLease", Test: onClient(testDoGivesTheLease)},
	{Name: "LeaseHandOff", Test: onClient(testLeaseHandOff)},
	{Name: "Locked", Test: onClient(testMutexLocked)},
}

func TestMutex(t *testing.T) { mutexSuite.Run(t) }

// TestMutexEmbedded proves the mutex works against miniredis, which users
// test with. miniredis expires keys only when told to (FastForward), so the
// expiry tests do not apply.
func TestMutexEmbedded(t *testing.T) {
	rdb := redistest.Embedded(t)
	testExclusive(t, []redis.UniversalClient{rdb, rdb}, 5, 5)
	testWaiterWokenByRelease(t, rdb)
	testUnlockWithCancelledContext(t, rdb)
	testDoReleasesOnPanic(t, rdb)
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

// go-redis falls back from EVALSHA to EVAL when the script cache is gone
// (a restart, a failover, SCRIPT FLUSH).
func testSurvivesScriptFlush(t *testing.T, rdb redis.UniversalClient) {
	m := lock.NewMutex(rdb, "flushed")
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(t.Context(), time.Minute); err != nil {
		t.Errorf("Extend after SCRIPT FLUSH = %v", err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("Unlock after SCRIPT FLUSH = %v", err)
	}
}

func testUnlockAfterExpiryIsNotHeld(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	a, ok, err := lock.NewMutex(rdb, "beer", lock.WithTTL(50*time.Millisecond)).TryLock(ctx)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v; want true, nil", ok, err)
	}
	quiet, _, err := lock.NewMutex(rdb, "beer-quiet", lock.WithTTL(30*time.Millisecond)).TryLock(ctx)
	if err != nil || quiet.Err() != nil {
		t.Fatalf("TryLock = %v, Err %v", err, quiet.Err())
	}
	<-a.Done() // local safe deadline: just before Redis expires the key
	// Nobody called quiet's Done: Err must notice the deadline by itself.
	if !errors.Is(quiet.Err(), lock.ErrLost) {
		t.Errorf("Err of an expired lease = %v; want ErrLost", quiet.Err())
	}
	select {
	case <-quiet.Done():
	default:
		t.Error("Done of an expired lease is not closed")
	}
	if !errors.Is(a.Err(), lock.ErrLost) {
		t.Errorf("Err after expiry = %v; want ErrLost", a.Err())
	}
	b, err := lock.NewMutex(rdb, "beer", lock.WithTTL(time.Minute)).Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after expiry: %v", err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("stale Unlock = %v; want ErrNotHeld", err)
	}
	if err := a.Extend(ctx, time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("stale Extend = %v; want ErrNotHeld", err)
	}
	ttl, err := b.TTL(ctx)
	if err != nil || ttl < 50*time.Second {
		t.Errorf("new holder TTL = %v, %v; want about 1m", ttl, err)
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("fences %d then %d; want increasing", a.Fence(), b.Fence())
	}
	if err := b.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if err := b.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Unlock = %v; want ErrNotHeld", err)
	}
	var nilLease *lock.Lease
	if err := nilLease.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("nil Unlock = %v; want ErrNotHeld", err)
	}
}

func testFencingOutlivesLocks(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	m := lock.NewMutex(rdb, "fenced", lock.WithTTL(20*time.Millisecond))
	var last int64
	for i := range 6 { // ends with a release, so only the counter is left
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("acquisition %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if i%2 == 0 {
			<-l.Done() // let it expire instead of releasing
		} else if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.Exists(ctx, "dogpile:mutex:{fenced}").Val(); n != 0 {
		t.Errorf("lock key left after release")
	}
	if d := rdb.PTTL(ctx, "dogpile:mutex:{fenced}:fence").Val(); d < lock.DefaultRetention-time.Minute || d > lock.DefaultRetention {
		t.Errorf("fence counter PTTL = %v; want the retention, %v (it outlives every lock)", d, lock.DefaultRetention)
	}
}

func testAutoExtendKeepsLeaseAndReportsLoss(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	// TTLs long enough that a loaded machine (-race, other packages'
	// tests) does not delay a renewal past one.
	l, err := lock.NewMutex(rdb, "watched", lock.WithTTL(240*time.Millisecond), lock.WithAutoExtend()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond) // more than three TTLs
	if l.Err() != nil {
		t.Fatalf("lease ended while the watchdog ran: %v", l.Err())
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
		t.Fatalf("TTL = %v, %v; want alive", ttl, err)
	}
	// Delete the key behind the holder's back: the next extension is
	// refused and Done must close within about one interval (80ms).
	if n := rdb.Del(ctx, "dogpile:mutex:{watched}").Val(); n != 1 {
		t.Fatalf("deleted %d lock keys; want 1", n)
	}
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("Done did not close after the key was deleted")
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", l.Err())
	}
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock of lost lease = %v; want ErrNotHeld", err)
	}
}

// testMaxHoldStopsAutoExtend: the watchdog extends a lease past its TTL
// until the max hold, and no further. A 1s TTL (renewed every 333ms) rides
// out a loaded machine's stalls; at 150ms a stall of ~100ms lost the lease
// at its first TTL (1 run in 8 of TestMutex failed, 'lost after 147ms').
func testMaxHoldStopsAutoExtend(t *testing.T, rdb redis.UniversalClient) {
	start := time.Now()
	l, err := lock.NewMutex(rdb, "capped", lock.WithTTL(time.Second),
		lock.WithAutoExtend(), lock.WithMaxHold(2*time.Second)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	if held := time.Since(start); held < 1500*time.Millisecond {
		t.Errorf("lease lost after %v; want it extended to about the max hold", held)
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", l.Err())
	}
	l.Unlock(t.Context())
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

func testUnlockWithCancelledContext(t *testing.T, rdb redis.UniversalClient) {
	ctx, cancel := context.WithCancel(t.Context())
	m := lock.NewMutex(rdb, "deferred")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with cancelled ctx = %v; want nil", err)
	}
	if _, ok, _ := m.TryLock(t.Context()); !ok {
		t.Error("lock still held after Unlock with a cancelled context")
	}
}

func TestRedisKilled(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	m := lock.NewMutex(rdb, "doomed")
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := m.Lock(ctx); err == nil || ctx.Err() != nil {
		t.Errorf("Lock with Redis down = %v (ctx %v); want a prompt error", err, ctx.Err())
	}
	if _, ok, err := m.TryLock(ctx); ok || err == nil {
		t.Errorf("TryLock with Redis down = %v, %v; want false, error", ok, err)
	}
	if err := l.Unlock(ctx); err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock with Redis down = %v; want a Redis error", err)
	}
}

func TestRedisPausedWatchdogReportsLoss(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	l, err := lock.NewMutex(rdb, "paused", lock.WithTTL(150*time.Millisecond), lock.WithAutoExtend()).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("lease not reported lost while Redis was paused")
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", l.Err())
	}
	srv.Resume()
	l.Unlock(t.Context())
}

func testDoReleasesOnPanic(t *testing.T, rdb redis.UniversalClient) {
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want boom", r)
			}
		}()
		lock.Do(t.Context(), rdb, "job", func(context.Context, *lock.Lease) error { panic("boom") })
	}()
	l, ok, _ := lock.NewMutex(rdb, "job").TryLock(t.Context())
	if !ok {
		t.Error("Do left the lock held after fn panicked")
	}
	l.Unlock(t.Context())
}

// testDoGivesTheLease: fn gets the lease it runs under, held, with a
// fence, so that it can hand the fence to its storage (issue 20: the block
// form hid the lease).
func testDoGivesTheLease(t *testing.T, rdb redis.UniversalClient) {
	var fences []int64
	for range 2 {
		err := lock.Do(t.Context(), rdb, "fenced", func(ctx context.Context, l *lock.Lease) error {
			if l == nil || l.Err() != nil || l.Fence() <= 0 {
				return fmt.Errorf("fn got lease %v (err %v)", l, l.Err())
			}
			fences = append(fences, l.Fence())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if fences[1] <= fences[0] {
		t.Errorf("fences %v; want increasing", fences)
	}
}

func testDoCancelsFnWhenLeaseLost(t *testing.T, rdb redis.UniversalClient) {
	err := lock.Do(t.Context(), rdb, "job", func(ctx context.Context, _ *lock.Lease) error {
		rdb.Del(ctx, "dogpile:mutex:{job}")
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrLost) {
				t.Errorf("cause = %v; want ErrLost", cause)
			}
			return nil
		case <-time.After(3 * time.Second):
			return errors.New("fn's context not cancelled after the lease was lost")
		}
	}, lock.WithTTL(60*time.Millisecond))
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Do = %v; want ErrNotHeld (work may have overlapped)", err)
	}
	want := errors.New("fn failed")
	if err := lock.Do(t.Context(), rdb, "job", func(context.Context, *lock.Lease) error { return want }); err != want {
		t.Errorf("Do = %v; want fn's error", err)
	}
}

func TestBadInput(t *testing.T) {
	rdb := redistest.Start(t)
	// Programmer errors panic, and say so.
	for name, f := range map[string]func(){
		"nil client":   func() { lock.NewMutex(nil, "x") },
		"zero TTL":     func() { lock.WithTTL(0) },
		"sub-ms TTL":   func() { lock.WithTTL(999 * time.Microsecond) },
		"bad backoff":  func() { lock.WithBackoff(time.Second, time.Millisecond) },
		"neg max hold": func() { lock.WithMaxHold(-1) },
		"no retention": func() { lock.WithRetention(0) },
		"nil Do fn":    func() { lock.Do(t.Context(), rdb, "x", nil) },
		"zero permits": func() { lock.NewSemaphore(rdb, "x", 0) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if s, ok := r.(string); !ok || !strings.HasPrefix(s, "lock: ") || !strings.HasSuffix(s, "(a programmer error)") {
					t.Errorf("panic = %v; want a \"lock: ... (a programmer error)\" message", r)
				}
			}()
			f()
		})
	}
	// Names and TTLs that may come from data are errors, never panics, and
	// touch nothing in Redis.
	rdb.FlushAll(t.Context())
	ctx := t.Context()
	for name, f := range map[string]func() error{
		"mutex Lock":       func() error { _, err := lock.NewMutex(rdb, "").Lock(ctx); return err },
		"mutex TryLock":    func() error { _, _, err := lock.NewMutex(rdb, "").TryLock(ctx); return err },
		"mutex Locked":     func() error { _, err := lock.NewMutex(rdb, "").Locked(ctx); return err },
		"fair mutex Lock":  func() error { _, err := lock.NewMutex(rdb, "", lock.WithFair()).Lock(ctx); return err },
		"Do":               func() error { return lock.Do(ctx, rdb, "", func(context.Context, *lock.Lease) error { return nil }) },
		"semaphore":        func() error { _, err := lock.NewSemaphore(rdb, "", 2).Acquire(ctx, 1); return err },
		"semaphore try":    func() error { _, _, err := lock.NewSemaphore(rdb, "", 2).TryAcquire(ctx, 1); return err },
		"semaphore avail":  func() error { _, err := lock.NewSemaphore(rdb, "", 2).Available(ctx); return err },
		"rw RLock":         func() error { _, err := lock.NewRWMutex(rdb, "").RLock(ctx); return err },
		"rw TryRLock":      func() error { _, _, err := lock.NewRWMutex(rdb, "").TryRLock(ctx); return err },
		"rw Lock":          func() error { _, err := lock.NewRWMutex(rdb, "").Lock(ctx); return err },
		"rw TryLock":       func() error { _, _, err := lock.NewRWMutex(rdb, "").TryLock(ctx); return err },
		"rw Locked":        func() error { _, err := lock.NewRWMutex(rdb, "").Locked(ctx); return err },
		"multi no names":   func() error { _, err := lock.NewMultiMutex(rdb, nil).Lock(ctx); return err },
		"multi empty name": func() error { _, _, err := lock.NewMultiMutex(rdb, []string{"a", ""}).TryLock(ctx); return err },
		"redlock":          func() error { _, err := lock.NewRedlock([]redis.UniversalClient{rdb}, "").Lock(ctx); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := f()
			if !errors.Is(err, lock.ErrInvalid) {
				t.Fatalf("err = %v; want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), "name") && !strings.Contains(err.Error(), "TTL") {
				t.Errorf("err = %q; want it to name the argument", err)
			}
		})
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys left by invalid calls; want 0", n)
	}
	l, _, err := lock.NewMutex(rdb, "x").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 999*time.Microsecond); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Extend(999µs) = %v; want ErrInvalid", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after a refused Extend = %v; the lease must be intact", err)
	}
	// Odd names are fine: braces must not split a lock across slots.
	for _, name := range []string{"}", "{", "a{b}c", " ", "ünïcode"} {
		l, ok, err := lock.NewMutex(rdb, name).TryLock(t.Context())
		if !ok || err != nil {
			t.Errorf("TryLock(%q) = %v, %v", name, ok, err)
		}
		l.Unlock(t.Context())
	}
	// A cancelled context fails fast and leaves nothing behind.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lock.NewMutex(rdb, "x").Lock(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Lock(cancelled) = %v; want ErrNotObtained and context.Canceled", err)
	}
	if n := rdb.Exists(t.Context(), "dogpile:mutex:{x}").Val(); n != 0 {
		t.Errorf("cancelled Lock left the lock key behind")
	}
}

func testLeaseHandOff(t *testing.T, rdb redis.UniversalClient) {
	l, err := lock.NewMutex(rdb, "handoff").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- l.Unlock(context.Background()) }() // another goroutine releases
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitForWaiter returns once a goroutine of this process waits, subscribed,
// on the wake-up channel of a lock.
func waitForWaiter(tb testing.TB, rdb redis.UniversalClient, channel string) {
	tb.Helper()
	redistest.Eventually(tb, "a waiter on "+channel, func() bool { return wake.Waiting(rdb, channel) > 0 })
}
