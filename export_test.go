package dogpile

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/script"
)

// This file exports to package dogpile_test what its tests need of the
// package's internals; it is compiled into the test binary only. The
// behaviour tests go through the public API and these few seams.

// WithNearTest is withNear(nearTest()): the near tier's config of this
// package's tests, for those of package dogpile_test (see nearTest), with
// edit applied if given.
func WithNearTest(edit ...func(*near.Config)) Option {
	cfg := nearTest()
	for _, e := range edit {
		e(&cfg)
	}
	return withNear(cfg)
}

// NewNearCache is newNearCache: a Cache with the tests' near tier, stopped
// when t ends (the white-box tests share it).
func NewNearCache[T any](t *testing.T, rdb redis.UniversalClient, size int, opts ...Option) *Cache[T] {
	t.Helper()
	return newNearCache[T](t, rdb, size, opts...)
}

// FetchNear is fetchNear: Fetch of key until a near hit answers it (the
// white-box tests share it).
func FetchNear[T any](t *testing.T, c *Cache[T], key string) T {
	t.Helper()
	return fetchNear(t, c, key)
}

// FetchValue is fetchValue: a Fetch of a cached key (the white-box tests
// share it).
func FetchValue[T any](t *testing.T, c *Cache[T], key string) T {
	t.Helper()
	return fetchValue(t, c, key)
}

// Tracker returns the tracker of c's near tier: its Config, and the hooks
// tests set before it starts (BeforeApply, BeforeSession, AfterIdle).
func Tracker[T any](c *Cache[T]) *near.Tracker { return c.near.Tracker() }

// NearIndex returns the coherence index of c's near tier (Up, Drop).
func NearIndex[T any](c *Cache[T]) *near.Index { return c.near.Index() }

// NearHas reports whether c's near tier holds key.
func NearHas[T any](c *Cache[T], key string) bool {
	_, ok := c.near.Peek(c.valueKey(key))
	return ok
}

// NearLen returns how many entries c's near tier holds, its pending
// evictions done.
func NearLen[T any](c *Cache[T]) int {
	return c.near.Len()
}

// InstallHolder is installHolder: it hooks rdb so that StartHeldFetch can
// hold a read on it. Call it before NewNearCache on rdb.
func InstallHolder(t *testing.T, rdb redis.UniversalClient) { installHolder(t, rdb) }

// StartHeldFetch is startHeldFetch: a Fetch of key whose read of "old" is
// held back (see there).
func StartHeldFetch(t *testing.T, rdb redis.UniversalClient, c *Cache[string], key string) (later func(), finish func() (string, error)) {
	t.Helper()
	return startHeldFetch(t, rdb, c, key)
}

// OnWait sets the hook that c calls when a flight starts waiting for
// another process's compute (tests order events with it, without sleeping).
// Set it before c's first Fetch.
func OnWait[T any](c *Cache[T], hook func(key string)) { c.onWait = hook }

// BeforeCompute sets the hook that c calls once the lock is held, before
// the compute's lease starts. Set it before c's first Fetch.
func BeforeCompute[T any](c *Cache[T], hook func(key string)) { c.beforeCompute = hook }

// Keys are the Redis names of one cache key (see keys).
type Keys struct {
	Value    string // the encoded value
	Lock     string // the compute lock
	Errs     string // recently failed computes
	Channel  string // wake-ups
	Throttle string // the retry interval after a failed refresh
}

// KeysOf returns the Redis names that c uses for key.
func KeysOf[T any](c *Cache[T], key string) Keys {
	ks := c.keys(key)
	return Keys{Value: ks.Value, Lock: ks.Lock, Errs: ks.Errs, Channel: ks.Channel, Throttle: ks.Throttle}
}

// Client returns the client c was made with.
func Client[T any](c *Cache[T]) redis.UniversalClient { return c.client }

// Flights returns how many flights of c run (a background refresh outlives
// the Fetch that started it).
func Flights[T any](c *Cache[T]) int {
	return c.flights.Len()
}

// RefreshCallers returns how many callers share c's Refresh flight of
// key (0 if none runs).
func RefreshCallers[T any](c *Cache[T], key string) int {
	return max(c.flights.Waiting(flightID{Kind: refreshFlight, Key: c.valueKey(key)}), 0)
}

// ErrComputeTooLong is the cause that ends a compute's context after
// WithMaxCompute's limit.
var ErrComputeTooLong = errComputeTooLong

// BreakerOpen reports whether the circuit of c's client is open.
func BreakerOpen[T any](c *Cache[T]) bool { return c.breaker.Open() }

// testScripts are the scripts LoadScripts loads.
var testScripts = []*redis.Script{script.Fetch, script.FetchMany, script.Store, script.Fail, script.Release, script.Extend, script.Set, script.Delete}

// LoadScripts loads every script on every server, so that counts do not
// include the one-off NOSCRIPT+EVAL of a script's first use.
func LoadScripts(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := t.Context()
	load := func(ctx context.Context, c *redis.Client) error {
		for _, s := range testScripts {
			if err := s.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, load)
	case *redis.Client:
		err = load(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Encode returns v as c stores it.
func Encode[T any](c *Cache[T], v T) ([]byte, error) { return c.encode(v) }

// MaxWakeValue is the largest value a wake-up carries; a waiter reads a
// larger one again.
const MaxWakeValue = maxWakeValue

// EarlyFloor is WithEarlyRefresh's floor: the gap is at least this many
// times the compute's duration (times beta).
const EarlyFloor = earlyFloor

// EntryTiming returns how long the compute of the stored entry raw ran and
// how long before expiry it is refreshed (WithEarlyRefresh).
func EntryTiming[T any](c *Cache[T], raw []byte) (took, early time.Duration, err error) {
	_, m, err := c.decodeEntry(raw)
	return m.Took, m.Early, err
}

// WithSourceDelay is withSourceDelay: WithSourceCheck's delay, shortened.
func WithSourceDelay(d time.Duration) Option { return withSourceDelay(d) }

// ChecksOpen returns how many checks of sampled hits c has queued and not
// ended, for both options.
func ChecksOpen[T any](c *Cache[T]) int64 {
	if c.checks == nil {
		return 0
	}
	return c.checks.near.Open() + c.checks.source.Open()
}

// CheckRate and CheckBurst bound the checks of sampled hits that begin:
// CheckRate a second, CheckBurst at once, per option.
const CheckRate, CheckBurst = check.Rate, check.Burst
