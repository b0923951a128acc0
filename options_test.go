package dogpile_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestNewRefusesNilClientsAndOptions: a nil client, untyped or typed (a
// nil *redis.Client, which passes a nil check), and a nil Option make New,
// and the lock package's constructors, panic at once with a message that
// names the mistake, not with a nil dereference at the first call.
func TestNewRefusesNilClientsAndOptions(t *testing.T) {
	rdb := redistest.NopClient(t)
	var typed *redis.Client
	var cluster *redis.ClusterClient
	for _, tc := range []struct {
		name, want string
		f          func()
	}{
		{"New(nil)", "dogpile: nil redis client", func() { dogpile.New[int](nil) }},
		{"New of a nil *redis.Client", "dogpile: nil redis client: a nil *redis.Client", func() { dogpile.New[int](typed) }},
		{"New of a nil *redis.ClusterClient", "a nil *redis.ClusterClient", func() { dogpile.New[int](cluster) }},
		{"New with a nil Option", "dogpile: option 2 of 2 given to New is nil", func() { dogpile.New[int](rdb, dogpile.WithLease(time.Second), nil) }},
		{"lock.NewMutex of a nil *redis.Client", "lock: nil redis client: a nil *redis.Client", func() { lock.NewMutex(typed, "m") }},
		{"lock.NewRWMutex of a nil *redis.Client", "lock: nil redis client", func() { lock.NewRWMutex(typed, "m") }},
		{"lock.NewSemaphore of a nil *redis.Client", "lock: nil redis client", func() { lock.NewSemaphore(typed, "m", 2) }},
		{"lock.NewMultiMutex of a nil *redis.Client", "lock: nil redis client", func() { lock.NewMultiMutex(typed, []string{"m"}) }},
		{"lock.NewRedlock of a nil *redis.Client", "lock: nil redis client", func() { lock.NewRedlock([]redis.UniversalClient{rdb, typed}, "m") }},
		{"lock.NewMutex with a nil Option", `lock: option 1 of 1 given to the mutex "m" is nil`, func() { lock.NewMutex(rdb, "m", nil) }},
	} {
		got := panicOf(tc.f)
		assert.Contains(t, got, tc.want, "%s panicked with %q; want a message with %q", tc.name, got, tc.want)
		assert.Contains(t, got, "programmer error", "%s panicked with %q; want a message with %q", tc.name, got, tc.want)
	}
}

// panicOf returns the message f panicked with, or "".
func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return ""
}

// TestOptionErrorsNameTheOption: an error that an option's bound caused
// says so, with the bound: a wait cut by WithWaitTimeout (still matching
// context.DeadlineExceeded) is not taken for the caller's own deadline, and
// the cause that ends a compute at WithMaxCompute names it.
func TestOptionErrorsNameTheOption(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	holder := dogpile.New[int](rdb, prefix(t), dogpile.WithMaxCompute(300*time.Millisecond))
	waiter := dogpile.New[int](rdb, prefix(t), dogpile.WithWaitTimeout(50*time.Millisecond)) // another process
	defer holder.Close()
	defer waiter.Close()
	computing := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := holder.Fetch(ctx, "k", time.Minute, func(ctx context.Context) (int, error) {
			close(computing)
			<-ctx.Done()
			return 0, context.Cause(ctx)
		})
		held <- err
	}()
	<-computing
	_, err := waiter.Fetch(ctx, "k", time.Minute, redistest.NoCompute[int])
	if assert.ErrorIs(t, err, context.DeadlineExceeded, "Fetch cut by the wait timeout; want DeadlineExceeded naming WithWaitTimeout(50ms)") {
		assert.ErrorContains(t, err, "WithWaitTimeout(50ms)", "Fetch cut by the wait timeout; want DeadlineExceeded naming WithWaitTimeout(50ms)")
	}
	err = <-held
	if assert.ErrorIs(t, err, dogpile.ErrComputeTooLong, "Fetch whose compute ran out its bound; want the cause naming WithMaxCompute and 300ms") {
		assert.ErrorContains(t, err, "300ms (WithMaxCompute)", "Fetch whose compute ran out its bound; want the cause naming WithMaxCompute and 300ms")
	}
}

// TestTTLJitter: with WithTTLJitter(0.2), values stored together by Set and
// by one FetchMany get TTLs spread over ±20 % of the caller's (the stale
// window added after), so they do not expire together.
func TestTTLJitter(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	c := dogpile.New[int](rdb, prefix(t), dogpile.WithTTLJitter(0.2), dogpile.WithStale(time.Minute))
	const ttl, n = 10 * time.Second, 100
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
		require.NoError(t, c.Set(ctx, "set"+keys[i], i, ttl))
	}
	if _, err := c.FetchMany(ctx, keys, ttl, func(_ context.Context, missing []string) (map[string]int, error) {
		out := map[string]int{}
		for i, k := range missing {
			out[k] = i
		}
		return out, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"set", ""} {
		lo, hi := time.Hour, time.Duration(0)
		for _, k := range keys {
			pttl, err := rdb.PTTL(ctx, dogpile.KeysOf(c, kind+k).Value).Result()
			require.NoError(t, err)
			fresh := pttl - time.Minute
			if fresh < 8*time.Second-time.Second || fresh > 12*time.Second {
				t.Fatalf("%s%s: fresh for %v; want 10s ± 20%%", kind, k, fresh)
			}
			lo, hi = min(lo, fresh), max(hi, fresh)
		}
		if hi-lo < 2*time.Second {
			t.Errorf("%q keys: TTLs between %v and %v; want them spread over most of 8s..12s", kind, lo, hi)
		}
	}
	mustPanic(t, "WithTTLJitter(1)", func() { dogpile.WithTTLJitter(1) })
	mustPanic(t, "WithTTLJitter(0)", func() { dogpile.WithTTLJitter(0) })
}
