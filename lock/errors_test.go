package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// primitive is one kind of lock, seen through its blocking and its
// one-shot acquire.
type primitive struct {
	name string
	lock func(ctx context.Context) (*lock.Lease, error)
	try  func(ctx context.Context) (*lock.Lease, bool, error)
	key  string // a key a holder's lease lives in
}

// primitives returns every kind of lock on rdb, all called name, each
// with opts.
func primitives(rdb redis.UniversalClient, name string, opts ...lock.Option) []primitive {
	m := lock.NewMutex(rdb, name, opts...)
	fair := lock.NewMutex(rdb, name+"-fair", append(opts, lock.WithFair())...)
	s := lock.NewSemaphore(rdb, name, 1, opts...)
	rw := lock.NewRWMutex(rdb, name, opts...)
	mm := lock.NewMultiMutex(rdb, []string{name + "-a", name + "-b"}, opts...)
	rl := lock.NewRedlock([]redis.UniversalClient{rdb}, name, opts...)
	return []primitive{
		{"Mutex", m.Lock, m.TryLock, "dogpile:mutex:{" + name + "}"},
		{"fair Mutex", fair.Lock, fair.TryLock, "dogpile:mutex:{" + name + "-fair}:h"},
		{"Semaphore", func(ctx context.Context) (*lock.Lease, error) { return s.Acquire(ctx, 1) },
			func(ctx context.Context) (*lock.Lease, bool, error) { return s.TryAcquire(ctx, 1) },
			"dogpile:sem:{" + name + "}:h"},
		{"RWMutex writer", rw.Lock, rw.TryLock, "dogpile:rw:{" + name + "}"},
		{"MultiMutex", mm.Lock, mm.TryLock, "dogpile:mutex:{" + name + "-b}"},
		{"Redlock", rl.Lock, rl.TryLock, "dogpile:redlock:{" + name + "}"},
	}
}

// TestErrNotObtained: a blocking acquire that gives up on a busy lock says
// so with ErrNotObtained, and its context's error still matches; TryLock
// reports busy as false with no error; a Redis failure is not "not
// obtained".
func TestErrNotObtained(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t) // a given-up waiter's place expires with real time (miniredis: only on FastForward)
	for _, p := range primitives(rdb, "busy", lock.WithTTL(time.Minute)) {
		t.Run(p.name, func(t *testing.T) {
			held, err := p.lock(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(t.Context())

			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			if _, err := p.lock(ctx); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Lock past its deadline = %v; want ErrNotObtained and context.DeadlineExceeded", err)
			}
			ctx, cancel = context.WithCancel(t.Context())
			cancel()
			if _, err := p.lock(ctx); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
				t.Errorf("Lock cancelled = %v; want ErrNotObtained and context.Canceled", err)
			}
			if l, ok, err := p.try(t.Context()); l != nil || ok || err != nil {
				t.Errorf("TryLock of a busy lock = %v, %v, %v; want nil, false, nil", l, ok, err)
			}
		})
	}
	// WithWaitTimeout gives up the same way.
	held, err := lock.NewMutex(rdb, "busy").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(t.Context())
	m := lock.NewMutex(rdb, "busy", lock.WithWaitTimeout(20*time.Millisecond))
	if _, err := m.Lock(t.Context()); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lock past WithWaitTimeout = %v; want ErrNotObtained and context.DeadlineExceeded", err)
	}
	err = lock.Do(t.Context(), rdb, "busy", func(context.Context, *lock.Lease) error { return nil }, lock.WithWaitTimeout(20*time.Millisecond))
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Do on a busy lock = %v; want ErrNotObtained", err)
	}

	down := redis.NewClient(&redis.Options{Addr: redistest.DeadAddr(t), MaxRetries: -1})
	defer down.Close()
	for _, p := range primitives(down, "x") {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		if _, err := p.lock(ctx); err == nil || errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("%s Lock with Redis down = %v; want a Redis error, not ErrNotObtained", p.name, err)
		}
		cancel()
	}
}

// TestErrorsNameTheLock: with Redis down, the error of every call of a
// Mutex, a Semaphore and an RWMutex reads `lock: <op> <primitive>
// "<name>": ...`: the first call of a fresh client fails its round trip
// (a refused dial), and once the breaker has found the server down, every
// call, the queries included, is turned away by the open circuit with
// ErrUnavailable naming the server; both paths name the primitive alike.
func TestErrorsNameTheLock(t *testing.T) {
	srv := redistest.StartServer(t)
	srv.Kill()
	type call struct {
		op   string
		call func(ctx context.Context) error
	}
	for _, c := range []struct {
		kind  string
		calls func(rdb redis.UniversalClient) []call
	}{
		{"mutex", func(rdb redis.UniversalClient) []call {
			m := lock.NewMutex(rdb, "down")
			return []call{
				{"acquire", func(ctx context.Context) error { _, _, err := m.TryLock(ctx); return err }},
				{"acquire", func(ctx context.Context) error { _, err := m.Lock(ctx); return err }},
				{"locked", func(ctx context.Context) error { _, err := m.Locked(ctx); return err }},
			}
		}},
		{"semaphore", func(rdb redis.UniversalClient) []call {
			s := lock.NewSemaphore(rdb, "down", 2)
			return []call{
				{"acquire", func(ctx context.Context) error { _, err := s.Acquire(ctx, 1); return err }},
				{"acquire", func(ctx context.Context) error { _, _, err := s.TryAcquire(ctx, 1); return err }},
				{"available", func(ctx context.Context) error { _, err := s.Available(ctx); return err }},
			}
		}},
		{"rwmutex", func(rdb redis.UniversalClient) []call {
			rw := lock.NewRWMutex(rdb, "down")
			return []call{
				{"acquire", func(ctx context.Context) error { _, err := rw.RLock(ctx); return err }},
				{"acquire", func(ctx context.Context) error { _, err := rw.Lock(ctx); return err }},
				{"locked", func(ctx context.Context) error { _, err := rw.Locked(ctx); return err }},
			}
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1}) // its own circuit, closed
			defer rdb.Close()
			calls := c.calls(rdb)
			try := func(i int) error {
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				err := calls[i].call(ctx)
				if want := `lock: ` + calls[i].op + ` ` + c.kind + ` "down": `; err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Errorf("call %d (%s) with Redis down = %v; want %q...", i, calls[i].op, err, want)
				}
				return err
			}
			if err := try(0); errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
				t.Errorf("first call with Redis down = %v; want its refused dial", err)
			}
			redistest.Eventually(t, "the circuit to open", func() bool { return errors.Is(try(0), lock.ErrUnavailable) })
			for i := range calls {
				if err := try(i); !errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), srv.Addr()) {
					t.Errorf("call %d (%s) with the circuit open = %v; want ErrUnavailable naming %s", i, calls[i].op, err, srv.Addr())
				}
			}
		})
	}
}

// TestLeaseErrorsNameTheLock: a lease's Extend, TTL and Unlock that fail
// to reach Redis name the primitive and the lock as the acquires do.
func TestLeaseErrorsNameTheLock(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx := t.Context()
	leases := map[string]func() (*lock.Lease, error){
		"mutex":     func() (*lock.Lease, error) { return lock.NewMutex(rdb, "up").Lock(ctx) },
		"semaphore": func() (*lock.Lease, error) { return lock.NewSemaphore(rdb, "up", 2).Acquire(ctx, 1) },
		"rwmutex":   func() (*lock.Lease, error) { return lock.NewRWMutex(rdb, "up").RLock(ctx) },
	}
	held := map[string]*lock.Lease{}
	for kind, acquire := range leases {
		l, err := acquire()
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		held[kind] = l
	}
	srv.Kill()
	for kind, l := range held {
		for _, c := range []struct {
			op   string
			call func() error
		}{
			{"extend", func() error { return l.Extend(ctx, time.Minute) }},
			{"ttl", func() error { _, err := l.TTL(ctx); return err }},
			{"release", func() error { return l.Unlock(ctx) }}, // last: it ends the lease
		} {
			op, call := c.op, c.call
			err := call()
			want := `lock: ` + op + ` ` + kind + ` "up": `
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s with Redis down = %v; want %q...", op, err, want)
			}
		}
	}
}
