package dogpile_test

// Arguments that come from data (keys, TTLs) are refused with ErrInvalid,
// with no I/O; programmer errors (a nil compute, a bad option) panic.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestBadInput(t *testing.T) {
	c := dogpile.New[int](redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	ctx := context.Background()
	ok := func(context.Context) (int, error) { return 1, nil }
	// Keys and TTLs may come from data: an error naming the argument, no
	// panic and no I/O (the client points at a closed port).
	for name, err := range map[string]error{
		"empty key":        first(c.Fetch(ctx, "", time.Minute, ok)),
		"ttl":              first(c.Fetch(ctx, "k", 0, ok)),
		"ttl -1s":          first(c.Fetch(ctx, "k", -time.Second, ok)),
		"Refresh key":      first(c.Refresh(ctx, "", time.Minute, ok)),
		"Refresh ttl":      first(c.Refresh(ctx, "k", time.Microsecond, ok)),
		"Set ttl":          c.Set(ctx, "k", 1, 0),
		"Set empty key":    c.Set(ctx, "", 1, time.Minute),
		"Get empty key":    first(c.Get(ctx, "")),
		"Delete empty key": c.Delete(ctx, ""),
	} {
		if !errors.Is(err, dogpile.ErrInvalid) {
			t.Errorf("%s: err = %v; want ErrInvalid", name, err)
		} else if !strings.Contains(err.Error(), "key") && !strings.Contains(err.Error(), "ttl") {
			t.Errorf("%s: err = %v; want it to name the argument", name, err)
		}
	}
	// Programmer errors stay panics.
	mustPanic(t, "New(nil)", func() { dogpile.New[int](nil) })
	mustPanic(t, "Fetch with nil compute", func() { _, _ = c.Fetch(ctx, "k", time.Minute, nil) })
	mustPanic(t, "Refresh with nil compute", func() { _, _ = c.Refresh(ctx, "k", time.Minute, nil) })
	mustPanic(t, "WithPrefix with a brace", func() { dogpile.WithPrefix("a{") })
	mustPanic(t, `WithPrefix("")`, func() { dogpile.WithPrefix("") })
	mustPanic(t, "WithLease(0)", func() { dogpile.WithLease(0) })
	mustPanic(t, "WithMaxCompute(0)", func() { dogpile.WithMaxCompute(0) })
	mustPanic(t, "WithCodec(nil)", func() { dogpile.WithCodec(nil) })
	mustPanic(t, "WithWaitTimeout(-1)", func() { dogpile.WithWaitTimeout(-1) })
	mustPanic(t, "WithStale(0)", func() { dogpile.WithStale(0) })
	mustPanic(t, "WithNegativeTTL(0)", func() { dogpile.WithNegativeTTL(0) })
	mustPanic(t, "WithEarlyRefresh(0)", func() { dogpile.WithEarlyRefresh(0) })
	mustPanic(t, "WithRefreshRetry(0)", func() { dogpile.WithRefreshRetry(0) })
	_ = dogpile.Client(c).Close()
}

func first[T any](_ T, err error) error { return err }

func TestFetchManyBadInput(t *testing.T) {
	c := dogpile.New[string](redistest.NopClient(t)) // any I/O would fail
	ctx := t.Context()
	got, err := c.FetchMany(ctx, nil, time.Minute, redistest.NoComputeMany[string])
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("FetchMany(no keys) = %v, %v; want an empty map, nil", got, err)
	}
	for _, tc := range []struct {
		keys []string
		ttl  time.Duration
		want string
	}{
		{[]string{"a", ""}, time.Minute, "dogpile: invalid argument: key 2 of 2 is empty"},
		{[]string{"a"}, time.Microsecond, "ttl 1µs is below 1ms"},
		{[]string{"a"}, 0, "ttl 0: a Cache made WithDefaultTTL gives it a meaning"},
		{[]string{"a"}, -time.Second, "ttl -1s is below 1ms"},
	} {
		got, err := c.FetchMany(ctx, tc.keys, tc.ttl, redistest.NoComputeMany[string])
		if !errors.Is(err, dogpile.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || got != nil {
			t.Errorf("FetchMany(%q, %v) = %v, %v; want nil, ErrInvalid saying %q", tc.keys, tc.ttl, got, err, tc.want)
		}
	}
	mustPanic(t, "FetchMany(nil compute)", func() { _, _ = c.FetchMany(ctx, []string{"a"}, time.Minute, nil) })
	assert.Equal(t, dogpile.Stats{}, c.Stats(), "Stats; want nothing counted")
}

// TestCloseLeavesNoGoroutine: Close of a Cache whose near tier tracks and
// whose compute is in flight cancels that compute (cause ErrClosed), which
// releases its lock for other processes, answers its callers ErrClosed,
// stops tracking, and waits for all of it: after Close and the client's
// Close, no goroutine of the Cache is left (issue 20: the tracker's
// outlived the client by a minute). Every call after Close returns
// ErrClosed; Close again does nothing.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	s := redistest.StartServer(t)
	raw := s.Client(t)
	before := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	c := dogpile.New[string](rdb, prefix(t), dogpile.WithNearCache(100), dogpile.WithNearTest(), dogpile.WithStale(time.Minute))
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, "k", "v", time.Minute))
	dogpile.FetchNear(t, c, "k")
	computing, cause, fetched := make(chan struct{}), make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, "slow", time.Minute, func(ctx context.Context) (string, error) {
			close(computing)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return "", ctx.Err()
		})
		fetched <- err
	}()
	<-computing
	require.NoError(t, c.Close())
	if err := <-cause; !errors.Is(err, dogpile.ErrClosed) {
		t.Errorf("compute's context cause = %v; want ErrClosed", err)
	}
	if err := <-fetched; !errors.Is(err, dogpile.ErrClosed) {
		t.Errorf("Fetch in flight at Close = %v; want ErrClosed", err)
	}
	if n, err := raw.Exists(ctx, dogpile.KeysOf(c, "slow").Lock).Result(); assert.NoError(t, err, "the compute lock is still held after Close (%d, %v): other processes would wait a lease", n, err) {
		assert.EqualValues(t, 0, n, "the compute lock is still held after Close (%d, %v): other processes would wait a lease", n, err)
	}
	calls := map[string]func() error{
		"Fetch": func() error { _, err := c.Fetch(ctx, "k", time.Minute, redistest.Constant("x")); return err },
		"FetchMany": func() error {
			_, err := c.FetchMany(ctx, []string{"k"}, time.Minute, redistest.NoComputeMany[string])
			return err
		},
		"Refresh": func() error { _, err := c.Refresh(ctx, "k", time.Minute, redistest.Constant("x")); return err },
		"Get":     func() error { _, err := c.Get(ctx, "k"); return err },
		"Set":     func() error { return c.Set(ctx, "k", "x", time.Minute) },
		"Delete":  func() error { return c.Delete(ctx, "k") },
		"Close":   func() error { return errors.Join(c.Close(), dogpile.ErrClosed) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, dogpile.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
	require.NoError(t, rdb.Close())
	goleak.VerifyNone(t, before)
}

// TestCloseEndsEveryWait: Close also ends a Fetch waiting for another
// process's compute (it returns ErrClosed at once, and leaves the wake-up
// hub), a background refresh (its compute's context ends with cause
// ErrClosed) and a FetchMany computing a batch (ErrClosed); nothing of the
// Cache is left running once the client is closed too.
func TestCloseEndsEveryWait(t *testing.T) {
	s := redistest.StartServer(t)
	other := dogpile.New[string](s.Client(t), prefix(t))
	before := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	c := dogpile.New[string](rdb, prefix(t), dogpile.WithStale(time.Minute))
	ctx := context.Background()

	held, release := make(chan struct{}), make(chan struct{})
	otherDone := make(chan struct{})
	go func() {
		defer close(otherDone)
		other.Fetch(ctx, "w", time.Minute, func(context.Context) (string, error) {
			close(held)
			<-release
			return "v", nil
		})
	}()
	<-held
	waiting := make(chan struct{}, 1)
	dogpile.OnWait(c, func(string) { waiting <- struct{}{} })
	waited := make(chan error, 1)
	go func() { _, err := c.Fetch(ctx, "w", time.Minute, redistest.Constant("x")); waited <- err }()
	<-waiting

	require.NoError(t, c.Set(ctx, "s", "old", time.Millisecond))
	time.Sleep(5 * time.Millisecond) // past its TTL: stale from now on
	refreshing, refreshCause := make(chan struct{}), make(chan error, 1)
	if v, err := c.Fetch(ctx, "s", time.Minute, func(ctx context.Context) (string, error) {
		close(refreshing)
		<-ctx.Done()
		refreshCause <- context.Cause(ctx)
		return "", ctx.Err()
	}); err != nil || v != "old" {
		t.Fatalf("Fetch of a stale value = %q, %v; want old, served while it refreshes", v, err)
	}
	<-refreshing

	batching, batched := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := c.FetchMany(ctx, []string{"m1", "m2"}, time.Minute, func(ctx context.Context, _ []string) (map[string]string, error) {
			close(batching)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		batched <- err
	}()
	<-batching

	require.NoError(t, c.Close())
	for what, ch := range map[string]chan error{"Fetch waiting for another process": waited, "FetchMany computing": batched} {
		select {
		case err := <-ch:
			assert.ErrorIs(t, err, dogpile.ErrClosed, "%s at Close = %v; want ErrClosed", what, err)
		case <-time.After(5 * time.Second):
			t.Errorf("%s still running 5 s after Close", what)
		}
	}
	if err := <-refreshCause; !errors.Is(err, dogpile.ErrClosed) {
		t.Errorf("background refresh's context cause = %v; want ErrClosed", err)
	}
	close(release) // the other process's compute ends
	<-otherDone
	require.NoError(t, rdb.Close())
	goleak.VerifyNone(t, before)
}

// TestCloseIsNoComputeError: computes that Close ends (a Fetch's and a
// FetchMany's, in flight) are not compute errors: Stats().ComputeErrors
// stays 0, and the observer's ComputeEnd carries ErrClosed, as a clean
// deploy must not fire an alert on compute errors; a compute that fails
// on its own still counts. Before, each such compute counted.
func TestCloseIsNoComputeError(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	var mu sync.Mutex
	var ends []error
	observe := dogpile.WithObserver(func(ctx context.Context, e dogpile.Event) context.Context {
		if e.Kind == dogpile.EventComputeEnd {
			mu.Lock()
			ends = append(ends, e.Err)
			mu.Unlock()
		}
		return nil
	})
	c := dogpile.New[string](rdb, prefix(t), observe)
	ctx := t.Context()
	if _, err := c.Fetch(ctx, "fails", time.Minute, func(context.Context) (string, error) {
		return "", errors.New("backend down")
	}); err == nil {
		t.Fatal("the failing compute returned no error")
	}
	var computing sync.WaitGroup
	computing.Add(2)
	var done sync.WaitGroup
	done.Go(func() {
		_, _ = c.Fetch(ctx, "one", time.Minute, func(ctx context.Context) (string, error) {
			computing.Done()
			<-ctx.Done()
			return "", ctx.Err()
		})
	})
	done.Go(func() {
		_, _ = c.FetchMany(ctx, []string{"many"}, time.Minute, func(ctx context.Context, _ []string) (map[string]string, error) {
			computing.Done()
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})
	})
	computing.Wait()
	require.NoError(t, c.Close())
	done.Wait()
	if n := c.Stats().ComputeErrors; n != 1 {
		t.Errorf("ComputeErrors = %d; want 1, the compute that failed on its own", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ends) != 3 || errors.Is(ends[0], dogpile.ErrClosed) || !errors.Is(ends[1], dogpile.ErrClosed) || !errors.Is(ends[2], dogpile.ErrClosed) {
		t.Errorf("ComputeEnd errors = %v; want the failure, then ErrClosed twice", ends)
	}
}
