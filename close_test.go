package dogpile

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

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
	c := New[string](rdb, prefix(t), WithNearCache(100), withNear(nearTest()), WithStale(time.Minute))
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	fetchNear(t, c, "k")
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
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-cause; !errors.Is(err, ErrClosed) {
		t.Errorf("compute's context cause = %v; want ErrClosed", err)
	}
	if err := <-fetched; !errors.Is(err, ErrClosed) {
		t.Errorf("Fetch in flight at Close = %v; want ErrClosed", err)
	}
	if n, err := raw.Exists(ctx, keysFor(c.valueKey("slow")).lock).Result(); err != nil || n != 0 {
		t.Errorf("the compute lock is still held after Close (%d, %v): other processes would wait a lease", n, err)
	}
	calls := map[string]func() error{
		"Fetch":     func() error { _, err := c.Fetch(ctx, "k", time.Minute, constant("x")); return err },
		"FetchMany": func() error { _, err := c.FetchMany(ctx, []string{"k"}, time.Minute, nil2Many); return err },
		"Refresh":   func() error { _, err := c.Refresh(ctx, "k", time.Minute, constant("x")); return err },
		"Get":       func() error { _, err := c.Get(ctx, "k"); return err },
		"Set":       func() error { return c.Set(ctx, "k", "x", time.Minute) },
		"Delete":    func() error { return c.Delete(ctx, "k") },
		"Close":     func() error { return errors.Join(c.Close(), ErrClosed) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}

func nil2Many(context.Context, []string) (map[string]string, error) {
	return nil, errors.New("unexpected compute")
}

// TestCloseEndsEveryWait: Close also ends a Fetch waiting for another
// process's compute (it returns ErrClosed at once, and leaves the wake-up
// hub), a background refresh (its compute's context ends with cause
// ErrClosed) and a FetchMany computing a batch (ErrClosed); nothing of the
// Cache is left running once the client is closed too.
func TestCloseEndsEveryWait(t *testing.T) {
	s := redistest.StartServer(t)
	other := New[string](s.Client(t), prefix(t))
	before := goleak.IgnoreCurrent()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	c := New[string](rdb, prefix(t), WithStale(time.Minute))
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
	c.onWait = func(string) { waiting <- struct{}{} }
	waited := make(chan error, 1)
	go func() { _, err := c.Fetch(ctx, "w", time.Minute, constant("x")); waited <- err }()
	<-waiting

	if err := c.Set(ctx, "s", "old", time.Millisecond); err != nil {
		t.Fatal(err)
	}
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

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]chan error{"Fetch waiting for another process": waited, "FetchMany computing": batched} {
		select {
		case err := <-ch:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s at Close = %v; want ErrClosed", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s still running 5 s after Close", what)
		}
	}
	if err := <-refreshCause; !errors.Is(err, ErrClosed) {
		t.Errorf("background refresh's context cause = %v; want ErrClosed", err)
	}
	close(release) // the other process's compute ends
	<-otherDone
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
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
	observe := WithObserver(func(ctx context.Context, e Event) context.Context {
		if e.Kind == EventComputeEnd {
			mu.Lock()
			ends = append(ends, e.Err)
			mu.Unlock()
		}
		return nil
	})
	c := New[string](rdb, prefix(t), observe)
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
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	done.Wait()
	if n := c.Stats().ComputeErrors; n != 1 {
		t.Errorf("ComputeErrors = %d; want 1, the compute that failed on its own", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ends) != 3 || errors.Is(ends[0], ErrClosed) || !errors.Is(ends[1], ErrClosed) || !errors.Is(ends[2], ErrClosed) {
		t.Errorf("ComputeEnd errors = %v; want the failure, then ErrClosed twice", ends)
	}
}
