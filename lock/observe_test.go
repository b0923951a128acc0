package lock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

type recorder struct {
	mu     sync.Mutex
	events []lock.Event
}

func (r *recorder) observe(_ context.Context, e lock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds() []lock.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []lock.EventKind
	for _, e := range r.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

// TestObserver: each acquire reports obtained or not with its wait, and a
// lease reports its extensions, its release or its loss.
func TestObserver(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	var r recorder
	m := lock.NewMutex(rdb, "obs", lock.WithObserver(r.observe), lock.WithTTL(time.Second))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := m.TryLock(ctx); ok {
		t.Fatal("TryLock of a held mutex succeeded")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, werr := m.Lock(wctx)
	cancel()
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	short, err := lock.NewMutex(rdb, "obs2", lock.WithObserver(r.observe), lock.WithTTL(20*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond) // on purpose: past its 20ms TTL
	if !errors.Is(short.Err(), lock.ErrLost) {
		t.Fatalf("short lease Err = %v; want ErrLost", short.Err())
	}

	want := []lock.EventKind{lock.EventObtained, lock.EventNotObtained, lock.EventNotObtained,
		lock.EventExtended, lock.EventReleased, lock.EventObtained, lock.EventLost}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.events[1]; e.Err != nil || e.Lock != "mutex" || e.Name != "obs" {
		t.Errorf("busy TryLock event = %+v; want no error, lock mutex, name obs", e)
	}
	if e := r.events[2]; !errors.Is(e.Err, lock.ErrNotObtained) || !errors.Is(werr, lock.ErrNotObtained) || e.Took < 30*time.Millisecond {
		t.Errorf("timed-out Lock event = %+v; want ErrNotObtained after its 30ms wait", e)
	}
}

// TestBreakerAndLogger: with Redis killed, once the first refused dial has
// made the breaker find it down, every acquire fails at once with
// ErrUnavailable; a lost lease and the outage are logged, nothing else
// is.
func TestBreakerAndLogger(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	ctx := t.Context()
	m := lock.NewMutex(rdb, "br", lock.WithLogger(logger), lock.WithTTL(20*time.Millisecond))
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// On purpose past its 20ms TTL: Err finds the lease lost, and logs it.
	time.Sleep(40 * time.Millisecond)
	l.Err()
	s.Kill()
	// The first TryLock's dial is refused, which makes the breaker check
	// the server and open the circuit.
	redistest.Eventually(t, "the circuit to open", func() bool {
		_, _, err := m.TryLock(ctx)
		return errors.Is(err, lock.ErrUnavailable)
	})
	for _, call := range []func() error{
		func() error { _, _, err := m.TryLock(ctx); return err },
		func() error { _, err := m.Lock(ctx); return err },
		func() error { _, err := lock.NewSemaphore(rdb, "br", 2).Acquire(ctx, 1); return err },
		func() error { return lock.Do(ctx, rdb, "br", func(context.Context, *lock.Lease) error { return nil }) },
	} {
		start := time.Now()
		if err := call(); !errors.Is(err, lock.ErrUnavailable) || time.Since(start) > time.Second {
			t.Errorf("acquire with the circuit open = %v after %v; want ErrUnavailable at once", err, time.Since(start))
		}
	}
	out := buf.String()
	for _, want := range []string{"lease lost", "name=br", "redis unreachable"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d log lines; want 2:\n%s", n, out)
	}
}

// TestNoRollbackWhenTurnedAway: an acquire that the open circuit turned
// away (it sent nothing) starts no rollback: one against a Redis known to
// be down would hold a rollback slot for its whole timeout, and enough of
// them would crowd out the rollbacks that matter.
func TestNoRollbackWhenTurnedAway(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	s.Kill()
	m := lock.NewMutex(rdb, "ta")
	if _, _, err := m.TryLock(ctx); err == nil || errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("first TryLock with Redis down = %v; want its refused dial", err)
	}
	if n := lock.Rollbacks(); n != 0 {
		t.Errorf("a TryLock whose dial was refused left %d rollbacks in flight; want 0 (it sent nothing)", n)
	}
	redistest.Eventually(t, "the circuit to open", func() bool {
		_, _, err := m.TryLock(ctx)
		return errors.Is(err, lock.ErrUnavailable)
	})
	rw := lock.NewRWMutex(rdb, "ta")
	for name, call := range map[string]func() error{
		"Semaphore.Acquire": func() error { _, err := lock.NewSemaphore(rdb, "ta", 2).Acquire(ctx, 1); return err },
		"RWMutex.RLock":     func() error { _, err := rw.RLock(ctx); return err },
		"RWMutex.Lock":      func() error { _, err := rw.Lock(ctx); return err },
		// Mutex.Lock rolls back only from grant, which a turned-away call
		// never reaches: its entry guards against a later change.
		"Mutex.Lock": func() error { _, err := m.Lock(ctx); return err },
	} {
		if err := call(); !errors.Is(err, lock.ErrUnavailable) {
			t.Fatalf("%s with the circuit open = %v; want ErrUnavailable", name, err)
		}
		if n := lock.Rollbacks(); n != 0 {
			t.Errorf("%s turned away by the circuit left %d rollbacks in flight; want 0", name, n)
		}
	}
}

// TestObserverLostUnobserved: a lease that ran out while nobody looked
// (no Done, no Err) reports its loss when it is unlocked.
func TestObserverLostUnobserved(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	var r recorder
	l, err := lock.NewMutex(rdb, "unseen", lock.WithObserver(r.observe), lock.WithTTL(20*time.Millisecond)).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond) // on purpose: past its 20ms TTL, with nobody looking
	if err := l.Unlock(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock of an expired lease = %v; want ErrNotHeld", err)
	}
	if got, want := r.kinds(), []lock.EventKind{lock.EventObtained, lock.EventLost}; !slices.Equal(got, want) {
		t.Errorf("events %v; want %v", got, want)
	}
}

// TestFairMutexBehindBreaker: a fair Mutex goes through its client's
// circuit breaker as a plain one does: with Redis killed, its acquires
// fail at once with ErrUnavailable once the breaker has found the server
// down (its options were copied into its semaphore before the breaker was
// set, so it went to Redis every time).
func TestFairMutexBehindBreaker(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	m := lock.NewMutex(rdb, "fair", lock.WithFair())
	s.Kill()
	redistest.Eventually(t, "a fair TryLock to fail with ErrUnavailable", func() bool {
		_, _, err := m.TryLock(t.Context())
		return errors.Is(err, lock.ErrUnavailable)
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := m.Lock(ctx); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("fair Lock with the circuit open = %v; want ErrUnavailable", err)
	}
}
