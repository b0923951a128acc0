package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// A frozenLoad is one kind of call, made in a loop by goroutines on a
// client of its own (each client has its own circuit breaker, so each
// kind must notice the freeze by itself).
type frozenLoad struct {
	name       string
	goroutines int
	setup      func(t *testing.T, rdb *redis.Client, name string) func(ctx context.Context, i int) error
}

// frozenLoads are the calls issue 39 names: Fetch by a lone caller (its
// GETs go straight out) and by 40 (their GETs share pipelines), FetchMany,
// Set, every lock acquire, and Extend.
var frozenLoads = []frozenLoad{
	{"Fetch alone", 1, fetchLoad},
	{"Fetch by 40", 40, fetchLoad},
	{"FetchMany", 2, func(t *testing.T, rdb *redis.Client, name string) func(context.Context, int) error {
		c := dogpile.New[string](rdb, dogpile.WithPrefix(name+":"))
		t.Cleanup(func() { _ = c.Close() })
		return func(ctx context.Context, i int) error {
			_, err := c.FetchMany(ctx, []string{"a", "b", fmt.Sprint(i)}, time.Hour, constMany)
			return err
		}
	}},
	{"Set", 2, func(t *testing.T, rdb *redis.Client, name string) func(context.Context, int) error {
		c := dogpile.New[string](rdb, dogpile.WithPrefix(name+":"))
		t.Cleanup(func() { _ = c.Close() })
		return func(ctx context.Context, i int) error { return c.Set(ctx, fmt.Sprint(i), "v", time.Hour) }
	}},
	{"Mutex.Lock", 1, lockLoad(func(rdb *redis.Client, n string) func(context.Context) (*lock.Lease, error) {
		return lock.NewMutex(rdb, n).Lock
	})},
	{"Mutex.TryLock", 1, lockLoad(func(rdb *redis.Client, n string) func(context.Context) (*lock.Lease, error) {
		m := lock.NewMutex(rdb, n)
		return func(ctx context.Context) (*lock.Lease, error) { l, _, err := m.TryLock(ctx); return l, err }
	})},
	{"Semaphore.Acquire", 1, lockLoad(func(rdb *redis.Client, n string) func(context.Context) (*lock.Lease, error) {
		s := lock.NewSemaphore(rdb, n, 2)
		return func(ctx context.Context) (*lock.Lease, error) { return s.Acquire(ctx, 1) }
	})},
	{"RWMutex.RLock", 1, lockLoad(func(rdb *redis.Client, n string) func(context.Context) (*lock.Lease, error) {
		return lock.NewRWMutex(rdb, n).RLock
	})},
	{"MultiMutex.Lock", 1, lockLoad(func(rdb *redis.Client, n string) func(context.Context) (*lock.Lease, error) {
		return lock.NewMultiMutex(rdb, []string{n + "1", n + "2"}).Lock
	})},
	{"Lease.Extend", 1, func(t *testing.T, rdb *redis.Client, name string) func(context.Context, int) error {
		l, err := lock.NewMutex(rdb, name, lock.WithTTL(time.Hour)).Lock(t.Context())
		require.NoError(t, err)
		return func(ctx context.Context, _ int) error { return l.Extend(ctx, time.Hour) }
	}},
}

func fetchLoad(t *testing.T, rdb *redis.Client, name string) func(context.Context, int) error {
	c := dogpile.New[string](rdb, dogpile.WithPrefix(name+":"))
	t.Cleanup(func() { _ = c.Close() })
	return func(ctx context.Context, i int) error {
		_, err := c.Fetch(ctx, fmt.Sprint(i), time.Hour, redistest.Constant("v"))
		return err
	}
}

func constMany(_ context.Context, keys []string) (map[string]string, error) {
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = "v"
	}
	return m, nil
}

// lockLoad acquires a lock of one name per goroutine and releases it, on
// a deadline as short as the acquire's.
func lockLoad(mk func(rdb *redis.Client, name string) func(context.Context) (*lock.Lease, error)) func(*testing.T, *redis.Client, string) func(context.Context, int) error {
	return func(t *testing.T, rdb *redis.Client, name string) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			l, err := mk(rdb, fmt.Sprint(name, i))(ctx)
			if l != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				defer cancel()
				_ = l.Unlock(rctx)
			}
			return err
		}
	}
}

// TestFrozenServerNoticed freezes a real redis-server (SIGSTOP: it takes
// connections and answers nothing) under load from callers with 150 ms
// deadlines, on clients with the options the README recommends
// (ContextTimeoutEnabled), with go-redis's default retries and with none.
// Every kind of call gets ErrUnavailable within a second of the freeze,
// naming the server (issue 39: with default retries, none ever did: each
// call waited out its deadline), and succeeds again soon after the server
// runs again (target 300 ms; the test allows more on a loaded machine).
func TestFrozenServerNoticed(t *testing.T) {
	for _, retries := range []int{0, -1} {
		t.Run(fmt.Sprint("MaxRetries=", retries), func(t *testing.T) {
			s := redistest.StartServer(t)
			calls := make([]func(context.Context, int) error, len(frozenLoads))
			for i, fl := range frozenLoads {
				rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: retries})
				t.Cleanup(func() { _ = rdb.Close() })
				calls[i] = fl.setup(t, rdb, fl.name)
			}
			stop := make(chan struct{})
			answers := make([]func() []answer, len(frozenLoads))
			for i, fl := range frozenLoads {
				answers[i] = loadCalls(fl.goroutines, 150*time.Millisecond, stop, calls[i])
			}
			start := time.Now()
			time.Sleep(300 * time.Millisecond)
			s.Pause()
			frozen := time.Since(start)
			time.Sleep(2500 * time.Millisecond)
			s.Resume()
			resumed := time.Since(start)
			time.Sleep(1500 * time.Millisecond)
			close(stop)
			for i, fl := range frozenLoads {
				all := answers[i]()
				o := outageOf(all, frozen, resumed)
				t.Logf("%s: first ErrUnavailable %v after the freeze; first success %v after it ran again", fl.name, o.firstFast, o.recovered)
				if o.firstFast < 0 || o.firstFast > 2*time.Second {
					t.Errorf("%s: first ErrUnavailable %v after the freeze; want within a second (two on a loaded machine)", fl.name, o.firstFast)
				}
				if o.recovered < 0 || o.recovered > time.Second {
					t.Errorf("%s: first success %v after the server ran again; want within 300 ms (a second on a loaded machine)", fl.name, o.recovered)
				}
				if err := firstUnavailable(all); err != nil && !strings.Contains(err.Error(), s.Addr()) {
					t.Errorf("%s: %v does not name the server %s", fl.name, err, s.Addr())
				}
			}
		})
	}
}

func firstUnavailable(all []answer) error {
	for _, a := range all {
		if errors.Is(a.err, dogpile.ErrUnavailable) {
			return a.err
		}
	}
	return nil
}

// TestBusyClientIsNotAnOutage: a client with too few connections for its
// callers (PoolSize 2, 200 goroutines) and callers with 5 ms deadlines
// time out all the time against a healthy server, and a server that
// takes 300 ms over one command (DEBUG SLEEP) times out callers with
// 100 ms deadlines: neither is an outage. Each timeout makes the breaker
// ask the server, which answers its PING at once (or within the check's
// half second); no call gets ErrUnavailable. The client does not retry,
// so that every timeout reaches the breaker as one (before issue 39,
// three in a row opened the circuit: the slow command did).
func TestBusyClientIsNotAnOutage(t *testing.T) {
	s := redistest.StartServer(t, "--enable-debug-command", "yes")
	for _, tc := range []struct {
		name       string
		opts       redis.Options
		goroutines int
		deadline   time.Duration
		during     func()
	}{
		{"pool of 2, 200 callers, 5 ms deadlines", redis.Options{PoolSize: 2, MaxRetries: -1}, 200, 5 * time.Millisecond,
			func() { time.Sleep(2 * time.Second) }},
		{"one slow command, 100 ms deadlines", redis.Options{MaxRetries: -1}, 10, 100 * time.Millisecond, func() {
			admin := s.Client(t)
			for range 3 {
				time.Sleep(200 * time.Millisecond)
				assert.NoError(t, admin.Do(t.Context(), "DEBUG", "SLEEP", "0.3").Err())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Addr, opts.ContextTimeoutEnabled = s.Addr(), true
			rdb := redis.NewClient(&opts)
			t.Cleanup(func() { _ = rdb.Close() })
			c := dogpile.New[int](rdb, prefix(t))
			defer c.Close()
			stop := make(chan struct{})
			answers := loadKeys(c, []string{"a", "b", "c"}, tc.goroutines, tc.deadline, func(context.Context) (int, error) { return 1, nil }, stop)
			tc.during()
			close(stop)
			var ok, timedOut, unavailable int
			for _, a := range answers() {
				switch {
				case a.err == nil:
					ok++
				case errors.Is(a.err, context.DeadlineExceeded):
					timedOut++
				case errors.Is(a.err, dogpile.ErrUnavailable):
					unavailable++
					if unavailable == 1 {
						t.Errorf("a busy client's call: %v", a.err)
					}
				}
			}
			t.Logf("%d answered, %d timed out, %d ErrUnavailable", ok, timedOut, unavailable)
			if unavailable > 0 {
				t.Errorf("%d calls got ErrUnavailable from a healthy server; want 0", unavailable)
			}
			if timedOut == 0 {
				t.Error("no call timed out: the test did not make the breaker ask the server")
			}
		})
	}
}

// TestFrozenDuringFlightNoticed: callers that join a flight whose store
// hangs on a frozen server (sent on the flight's own context, which has no
// deadline: it waits for the client's read timeout, 5 s) leave at their
// deadlines, and their timeouts make the breaker ask the server; once it
// is found down, callers fail at once with ErrUnavailable instead of
// joining the stuck flight.
func TestFrozenDuringFlightNoticed(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dogpile.New[string](rdb, prefix(t))
	defer c.Close()
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = c.Fetch(context.Background(), "k", time.Hour, func(context.Context) (string, error) {
			close(started)
			<-release
			return "v", nil
		})
	}()
	<-started
	s.Pause()
	defer s.Resume()
	close(release) // its store now hangs on the frozen server
	frozen := time.Now()
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
		_, err := c.Fetch(ctx, "k", time.Hour, redistest.Constant("w"))
		cancel()
		if errors.Is(err, dogpile.ErrUnavailable) {
			t.Logf("first ErrUnavailable %v after the freeze", time.Since(frozen))
			return
		}
		if time.Since(frozen) > 3*time.Second {
			t.Fatalf("still %v 3 s after the freeze; want ErrUnavailable within a second (the flight's store times out at 5 s)", err)
		}
	}
}
