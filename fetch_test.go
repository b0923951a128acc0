package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The behaviour tests run on every deployment and on miniredis (see
// redistest.Suite): Fetch's, then those of the options and calls that shape
// what is stored and served, each in the file named for it. Each test has
// its own keys (see prefix), so one cluster serves every cluster subtest,
// and each Cache made on its own client stands for one process.
var behaviour = redistest.Suite{
	{Name: "GetSetDelete", Test: testGetSetDelete},
	{Name: "DedupInProcess", Test: testDedupInProcess},
	{Name: "DedupAcrossInstances", Test: testDedupAcrossInstances},
	{Name: "ComputeError", Test: testComputeError},
	{Name: "ComputePanic", Test: testComputePanic},
	{Name: "CorruptBytes", Test: testCorruptBytes},
	{Name: "WaiterCtxCancelled", Test: testWaiterCtxCancelled},
	{Name: "LocalCallerLeaves", Test: testLocalCallerLeaves},
	{Name: "DeadHolderTakenOver", Test: testDeadHolderTakenOver},
	{Name: "SlowComputeNotTakenOver", Test: testSlowComputeNotTakenOver},
	{Name: "SetDuringComputeIsFenced", Test: testSetDuringComputeIsFenced},
	{Name: "KeyWithBraces", Test: testKeyWithBraces},
	// What a Fetch sends (fetch_commands_test.go), what a wake-up carries
	// (fetch_wake_test.go).
	{Name: "CommandsPerFetch", Test: testCommandsPerFetch},
	{Name: "WakeUpCarriesValue", Test: testWakeUpCarriesValue},
	{Name: "LargeValueReadAgain", Test: testLargeValueReadAgain},
	// WithStale (fetch_stale_test.go), WithNegativeTTL
	// (fetch_negative_test.go), Refresh (fetch_refresh_test.go), SetTTL
	// and WithDefaultTTL (fetch_ttl_test.go), Expire (fetch_expire_test.go),
	// Previous (fetch_previous_test.go), WithSoftTimeout (fetch_soft_test.go),
	// WithEarlyRefresh (fetch_early_test.go).
	{Name: "StaleServedWhileOneRefreshes", Test: testStaleServedWhileOneRefreshes},
	{Name: "StaleRefreshFailsThrottled", Test: testStaleRefreshFailsThrottled},
	{Name: "NegativeCaching", Test: testNegativeCaching},
	{Name: "NotFoundWithoutNegativeTTL", Test: testNotFoundWithoutNegativeTTL},
	{Name: "RefreshForces", Test: testRefreshForces},
	{Name: "RefreshJoinsRunningCompute", Test: testRefreshJoinsRunningCompute},
	{Name: "SetTTLFromCompute", Test: testSetTTLFromCompute},
	{Name: "SetTTLZeroStoresNothing", Test: testSetTTLZeroStoresNothing},
	{Name: "DefaultTTL", Test: testDefaultTTL},
	{Name: "ExpireServesStale", Test: testExpireServesStale},
	{Name: "ExpireWithoutStale", Test: testExpireWithoutStale},
	{Name: "PreviousValue", Test: testPreviousValue},
	{Name: "SoftTimeout", Test: testSoftTimeout},
	{Name: "SoftTimeoutOtherProcess", Test: testSoftTimeoutOtherProcess},
	{Name: "EarlyRefreshBeforeExpiry", Test: testEarlyRefreshBeforeExpiry},
	// HotKeys (hotkeys_test.go).
	{Name: "HotKeys", Test: testHotKeys},
}

func TestFetch(t *testing.T) {
	t.Parallel() // its own deployments; the cases touch no package state (see redistest.Suite)
	behaviour.RunWithMiniredis(t)
}

func testGetSetDelete(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	if _, err := c.Get(ctx, "k"); !errors.Is(err, dogpile.ErrMiss) {
		t.Fatalf("Get on an empty cache: err = %v; want ErrMiss", err)
	}
	require.NoError(t, c.Set(ctx, "k", "pils", time.Minute), "Set")
	if got, err := c.Get(ctx, "k"); err != nil || got != "pils" {
		t.Fatalf("Get = %q, %v; want pils, nil", got, err)
	}
	pttl, err := dogpile.Client(c).PTTL(ctx, dogpile.KeysOf(c, "k").Value).Result()
	if err != nil || pttl <= 0 || pttl > time.Minute {
		t.Errorf("PTTL of the value = %v, %v; want in (0, 1m]", pttl, err)
	}
	require.NoError(t, c.Delete(ctx, "k"), "Delete")
	if _, err := c.Get(ctx, "k"); !errors.Is(err, dogpile.ErrMiss) {
		t.Errorf("Get after Delete: err = %v; want ErrMiss", err)
	}
	if got, want := c.Stats(), (dogpile.Stats{Hits: 1, Misses: 2}); got != want {
		t.Errorf("Stats = %+v; want %+v", got, want)
	}
}

func testDedupInProcess(t *testing.T, b redistest.Backend) {
	rdb := b.Client(t)
	c := dogpile.New[int](rdb, prefix(t))
	var computes atomic.Int64
	compute := func(context.Context) (int, error) {
		computes.Add(1)
		time.Sleep(50 * time.Millisecond) // a slow load; not synchronization
		return 42, nil
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if v, err := c.Fetch(t.Context(), "k", time.Minute, compute); assert.NoError(t, err, "Fetch = %v, %v; want 42, nil", v, err) {
				assert.EqualValues(t, 42, v, "Fetch = %v, %v; want 42, nil", v, err)
			}
		})
	}
	wg.Wait()
	if got := computes.Load(); got != 1 {
		t.Errorf("compute called %d times; want 1", got)
	}
	if s := c.Stats(); s.Hits+s.Misses != 50 || s.Computes != 1 {
		t.Errorf("Stats = %+v; want Hits+Misses = 50, Computes = 1", s)
	}
}

// testDedupAcrossInstances: 8 Caches, each with its own client, stand for
// 8 processes; none shares a flight with another.
func testDedupAcrossInstances(t *testing.T, b redistest.Backend) {
	ctr := &counted{rdb: b.Client(t), counter: t.Name() + ":counter"}
	var wg sync.WaitGroup
	caches := make([]*dogpile.Cache[string], 8)
	for i := range caches {
		caches[i] = dogpile.New[string](b.Client(t), prefix(t))
	}
	for _, c := range caches {
		for range 10 {
			wg.Go(func() {
				v, err := c.Fetch(t.Context(), "k", time.Minute, func(ctx context.Context) (string, error) {
					ctr.count(ctx)
					time.Sleep(100 * time.Millisecond) // a slow load
					return "lager", nil
				})
				if assert.NoError(t, err, "Fetch = %q, %v; want lager, nil", v, err) {
					assert.Equal(t, "lager", v, "Fetch = %q, %v; want lager, nil", v, err)
				}
			})
		}
	}
	wg.Wait()
	if got := ctr.total(t); got != 1 {
		t.Errorf("computes across instances = %d; want 1", got)
	}
	var push, poll uint64
	for _, c := range caches {
		s := c.Stats()
		push, poll = push+s.PushWakeups, poll+s.PollWakeups
	}
	if poll != 0 {
		t.Errorf("PollWakeups = %d, PushWakeups = %d; want every waiter woken by push", poll, push)
	}
}

func testComputeError(t *testing.T, b redistest.Backend) {
	holder := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	waiter := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	errDB := errors.New("db down")
	start := time.Now()
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) {
		return 0, errDB
	})
	close(release)
	if r := <-hres; !errors.Is(r.err, errDB) {
		t.Errorf("holder Fetch error = %v; want %v", r.err, errDB)
	}
	r := <-wres
	if !errors.Is(r.err, dogpile.ErrComputeFailed) || !strings.Contains(r.err.Error(), "db down") {
		t.Errorf("waiter Fetch error = %v; want ErrComputeFailed with the holder's message", r.err)
	}
	// The lease is a minute: the waiter was told, not left to wait it out.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("waiter took %v to learn of the failure", d)
	}
	assertNothingStored(t, holder, "k")
	if s := holder.Stats(); s.ComputeErrors != 1 {
		t.Errorf("holder ComputeErrors = %d; want 1", s.ComputeErrors)
	}
	if s := waiter.Stats(); s.RemoteErrors != 1 || s.Computes != 0 {
		t.Errorf("waiter Stats = %+v; want RemoteErrors 1, Computes 0", s)
	}
	// The next Fetch computes afresh.
	v, err := waiter.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) { return 7, nil })
	if assert.NoError(t, err, "Fetch after the failure = %v, %v; want 7, nil", v, err) {
		assert.EqualValues(t, 7, v, "Fetch after the failure = %v, %v; want 7, nil", v, err)
	}
}

func testComputePanic(t *testing.T, b redistest.Backend) {
	holder := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	waiter := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) {
		panic("boom")
	})
	close(release)
	if r := <-hres; r.err == nil || !strings.Contains(r.err.Error(), "panicked: boom") || strings.Contains(r.err.Error(), "goroutine ") {
		t.Errorf("holder Fetch error = %v; want a panic error with the value, not the stack", r.err)
	}
	if r := <-wres; !errors.Is(r.err, dogpile.ErrComputeFailed) || !strings.Contains(r.err.Error(), "boom") || strings.Contains(r.err.Error(), "goroutine ") {
		t.Errorf("waiter Fetch error = %v; want ErrComputeFailed with the message only", r.err)
	}
	assertNothingStored(t, holder, "k")
}

func testCorruptBytes(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	for i, raw := range []string{
		"not ours at all",
		"dp\x01\xc1",             // our header, a payload msgpack rejects
		"dp\x09\xa3abc",          // a format version we do not know
		"dp\x01\x93\x01\x02\x03", // valid msgpack, wrong type (array)
	} {
		key := fmt.Sprint("k", i)
		require.NoError(t, dogpile.Client(c).Set(ctx, dogpile.KeysOf(c, key).Value, raw, time.Minute).Err())
		if _, err := c.Get(ctx, key); !errors.Is(err, dogpile.ErrMiss) {
			t.Errorf("Get(%q) over %q: err = %v; want ErrMiss", key, raw, err)
		}
		v, err := c.Fetch(ctx, key, time.Minute, func(context.Context) (string, error) { return "fresh", nil })
		if assert.NoError(t, err, "Fetch over %q = %q, %v; want fresh, nil", raw, v, err) {
			assert.Equal(t, "fresh", v, "Fetch over %q = %q, %v; want fresh, nil", raw, v, err)
		}
		if got, err := c.Get(ctx, key); assert.NoError(t, err, "Get after Fetch over %q = %q, %v; want fresh, nil (overwritten)", raw, got, err) {
			assert.Equal(t, "fresh", got, "Get after Fetch over %q = %q, %v; want fresh, nil (overwritten)", raw, got, err)
		}
	}
	if s := c.Stats(); s.DecodeErrors != 8 || s.Computes != 4 {
		t.Errorf("Stats = %+v; want DecodeErrors 8 (4 by Get, 4 by Fetch), Computes 4", s)
	}
}

func testWaiterCtxCancelled(t *testing.T, b redistest.Backend) {
	holder := dogpile.New[int](b.Client(t), prefix(t))
	waiter := dogpile.New[int](b.Client(t), prefix(t))
	ctx, cancel := context.WithCancel(t.Context())
	release, hres, wres := holdAndWait(t, holder, waiter, ctx, "k", func(context.Context) (int, error) {
		return 1, nil
	})
	cancel()
	if r := <-wres; r.err != context.Canceled {
		t.Errorf("waiter Fetch error = %v; want context.Canceled", r.err)
	}
	close(release)
	if r := <-hres; assert.NoError(t, r.err, "holder Fetch = %v, %v; want 1, nil", r.v, r.err) {
		assert.EqualValues(t, 1, r.v, "holder Fetch = %v, %v; want 1, nil", r.v, r.err)
	}
	if v, err := waiter.Get(t.Context(), "k"); assert.NoError(t, err, "Get = %v, %v; want 1, nil", v, err) {
		assert.EqualValues(t, 1, v, "Get = %v, %v; want 1, nil", v, err)
	}
}

// testLocalCallerLeaves: the caller that started a compute gives up; the
// compute is not cancelled, and another caller of the flight gets the value.
func testLocalCallerLeaves(t *testing.T, b redistest.Backend) {
	c := dogpile.New[int](b.Client(t), prefix(t))
	ctx, cancel := context.WithCancel(t.Context())
	computing, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := c.Fetch(ctx, "k", time.Minute, func(cctx context.Context) (int, error) {
			close(computing)
			<-release
			return 5, cctx.Err()
		})
		first <- err
	}()
	<-computing
	second := make(chan result[int], 1)
	go func() {
		v, err := c.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) { return 6, nil })
		second <- result[int]{v, err}
	}()
	cancel()
	if err := <-first; err != context.Canceled {
		t.Errorf("first caller: err = %v; want context.Canceled", err)
	}
	close(release)
	if r := <-second; assert.NoError(t, r.err, "second caller = %v, %v; want 5, nil (the shared compute)", r.v, r.err) {
		assert.EqualValues(t, 5, r.v, "second caller = %v, %v; want 5, nil (the shared compute)", r.v, r.err)
	}
}

// testDeadHolderTakenOver: a lock whose holder is gone (never stores,
// never renews) is taken over when its lease runs out.
func testDeadHolderTakenOver(t *testing.T, b redistest.Backend) {
	c := dogpile.New[int](b.Client(t), prefix(t))
	ctx := t.Context()
	require.NoError(t, dogpile.Client(c).Set(ctx, dogpile.KeysOf(c, "k").Lock, "dead-holder", 300*time.Millisecond).Err())
	if b.Advance != nil {
		dogpile.OnWait(c, func(string) { b.Advance(time.Second) })
	}
	v, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (int, error) { return 3, nil })
	require.NoError(t, err, "Fetch = %v, %v; want 3, nil", v, err)
	require.EqualValues(t, 3, v, "Fetch = %v, %v; want 3, nil", v, err)
	if s := c.Stats(); s.Takeovers != 1 || s.Waits != 1 || s.PollWakeups == 0 {
		t.Errorf("Stats = %+v; want Takeovers 1, Waits 1, PollWakeups > 0", s)
	}
}

// testSlowComputeNotTakenOver: compute runs for several leases; renewal
// keeps the lock, so a waiting instance does not compute too.
func testSlowComputeNotTakenOver(t *testing.T, b redistest.Backend) {
	// Renewed every third of the lease: a 60ms lease was lost to a 40ms
	// stall of a loaded machine (1 run in 20), which is a takeover by design;
	// 1s rides out the stalls of the suite's deployments run side by side
	// beside two CPU hogs.
	const lease = time.Second
	holder := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(lease))
	waiter := dogpile.New[int](b.Client(t), prefix(t), dogpile.WithLease(lease))
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) {
		return 9, nil
	})
	time.Sleep(3 * lease / 2) // the compute outlives its lease: held only if renewed; not synchronization
	close(release)
	if r := <-hres; assert.NoError(t, r.err, "holder = %v, %v; want 9, nil", r.v, r.err) {
		assert.EqualValues(t, 9, r.v, "holder = %v, %v; want 9, nil", r.v, r.err)
	}
	if r := <-wres; assert.NoError(t, r.err, "waiter = %v, %v; want 9, nil", r.v, r.err) {
		assert.EqualValues(t, 9, r.v, "waiter = %v, %v; want 9, nil", r.v, r.err)
	}
	if s := waiter.Stats(); s.Computes != 0 || s.Takeovers != 0 {
		t.Errorf("waiter Stats = %+v; want no compute, no takeover", s)
	}
}

// testSetDuringComputeIsFenced: a Set while a compute runs wins; the
// compute's result is not stored over it, and its own callers get the
// Set's value too (the refused store looks again).
func testSetDuringComputeIsFenced(t *testing.T, b redistest.Backend) {
	holder := dogpile.New[int](b.Client(t), prefix(t))
	other := dogpile.New[int](b.Client(t), prefix(t))
	release, hres, wres := holdAndWait(t, holder, other, t.Context(), "k", func(context.Context) (int, error) {
		return 1, nil
	})
	require.NoError(t, other.Set(t.Context(), "k", 2, time.Minute))
	if r := <-wres; assert.NoError(t, r.err, "waiter = %v, %v; want 2 (the Set value), nil", r.v, r.err) {
		assert.EqualValues(t, 2, r.v, "waiter = %v, %v; want 2 (the Set value), nil", r.v, r.err)
	}
	close(release)
	if r := <-hres; assert.NoError(t, r.err, "holder = %v, %v; want 2, the Set's value (its store was refused), nil", r.v, r.err) {
		assert.EqualValues(t, 2, r.v, "holder = %v, %v; want 2, the Set's value (its store was refused), nil", r.v, r.err)
	}
	if v, err := other.Get(t.Context(), "k"); assert.NoError(t, err, "Get = %v, %v; want 2 (not overwritten by the stale compute)", v, err) {
		assert.EqualValues(t, 2, v, "Get = %v, %v; want 2 (not overwritten by the stale compute)", v, err)
	}
}

func testKeyWithBraces(t *testing.T, b redistest.Backend) {
	c := dogpile.New[string](b.Client(t), prefix(t))
	for _, key := range []string{"{", "}", "a{b}c", "{}", "x}{y"} {
		v, err := c.Fetch(t.Context(), key, time.Minute, func(context.Context) (string, error) { return key, nil })
		if assert.NoError(t, err, "Fetch(%q) = %q, %v; want %q, nil", key, v, err, key) {
			assert.Equal(t, key, v, "Fetch(%q) = %q, %v; want %q, nil", key, v, err, key)
		}
		if got, err := c.Get(t.Context(), key); assert.NoError(t, err, "Get(%q) = %q, %v", key, got, err) {
			assert.Equal(t, key, got, "Get(%q) = %q, %v", key, got, err)
		}
	}
	if a, b := dogpile.KeysOf(c, "a{b}c").Value, dogpile.KeysOf(c, "{a{b}c}").Value; a == b {
		t.Errorf("distinct keys share the Redis key %q", a)
	}
}
