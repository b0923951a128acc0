package dogpile

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"
)

// An Option configures a Cache.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	prefix        string
	codec         Codec
	lease         time.Duration
	waitTimeout   time.Duration
	maxCompute    time.Duration
	computeIfDown bool

	stale        time.Duration // WithStale: how long past its TTL a value is served
	beta         float64       // WithEarlyRefresh; 0: off
	negativeTTL  time.Duration // WithNegativeTTL; 0: not-found results are not stored
	refreshRetry time.Duration // WithRefreshRetry

	nearEntries int // WithNearCache; 0: no near tier

	logger   *slog.Logger                                 // WithLogger; nil: silent
	observer func(context.Context, Event) context.Context // WithObserver
}

func buildOptions(opts []Option) options {
	o := options{prefix: defaultPrefix, codec: MsgPack, lease: defaultLease, refreshRetry: defaultRefreshRetry}
	for _, opt := range opts {
		opt.apply(&o)
	}
	return o
}

// WithPrefix sets the prefix of every Redis key and channel the Cache uses.
// Caches with different prefixes never see each other's values. The default
// is "dogpile:". WithPrefix panics if prefix contains '{' or '}', which
// would change the hash tag that keeps a key's data in one cluster slot.
func WithPrefix(prefix string) Option {
	if strings.ContainsAny(prefix, "{}") {
		panic(fmt.Sprintf("dogpile: prefix %q contains a brace (a programmer error)", prefix))
	}
	return optionFunc(func(o *options) { o.prefix = prefix })
}

// WithCodec sets how values are turned into bytes. The default is
// [MsgPack]. Whatever the codec, stored bytes start with a small header
// (magic and format version), so bytes written by something else read as
// a miss. WithCodec panics if codec is nil.
func WithCodec(codec Codec) Option {
	if codec == nil {
		panic("dogpile: nil codec (a programmer error)")
	}
	return optionFunc(func(o *options) { o.codec = codec })
}

// WithLease sets the lease of the compute lock: how long a process that
// computes a value holds the lock in Redis without renewing it. The lease
// is renewed every third of its length while compute runs, so a slow
// compute is never taken over, while a process that dies (or cannot reach
// Redis) loses the lock, and another process takes over, within one lease.
// The default is 5 seconds. WithLease panics if d is below 10ms.
func WithLease(d time.Duration) Option {
	if d < 10*time.Millisecond {
		panic(fmt.Sprintf("dogpile: lease %v is below 10ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.lease = d })
}

// WithMaxCompute bounds how long one compute may keep the compute lock.
// compute's context ends after d, and the lease is no longer renewed past
// d, so a compute that hangs (and ignores its context) is taken over by
// another process within one lease after d, instead of blocking every
// process's callers for as long as it hangs. A compute that ends past d is
// still returned to its own callers, but stores nothing if another process
// took over. The default is no bound. WithMaxCompute panics if d is not
// positive.
func WithMaxCompute(d time.Duration) Option {
	if d <= 0 {
		panic("dogpile: max compute must be positive (a programmer error)")
	}
	return optionFunc(func(o *options) { o.maxCompute = d })
}

// WithWaitTimeout bounds how long a Fetch waits for another process to
// compute a value, on top of its context's deadline. When it passes, Fetch
// returns an error matching [context.DeadlineExceeded]. The default is to
// wait as long as the context allows (each wait is still bounded by the
// computing process's lease, so a dead holder is taken over).
// WithWaitTimeout panics if d is negative.
func WithWaitTimeout(d time.Duration) Option {
	if d < 0 {
		panic("dogpile: negative wait timeout (a programmer error)")
	}
	return optionFunc(func(o *options) { o.waitTimeout = d })
}

// WithComputeWhenDown makes Fetch call compute, without the cache, when
// Redis cannot be reached (a network error, not an error reply). Calls in
// one process are still deduplicated, but processes no longer coordinate.
// By default Fetch returns the Redis error, wrapped, and does not compute:
// a Redis outage then does not turn into a stampede on the backing store.
func WithComputeWhenDown() Option {
	return optionFunc(func(o *options) { o.computeIfDown = true })
}

// WithStale keeps each value in Redis for max past its TTL, and serves it
// during that time: a Fetch that finds a value past its TTL returns it at
// once and starts a refresh in the background. One process in the fleet
// refreshes (the compute lock decides; in a process, one flight); the others
// keep serving the stale value until the new one is stored. Callers of a key
// with no value at all still wait for its compute, woken by push.
//
// A refresh that fails (an error, a panic, a WithMaxCompute timeout) leaves
// the stale value in place, served until TTL + max; no process refreshes the
// key again for the retry interval (see [WithRefreshRetry]), so a failing
// backend sees at most one call per key per interval from the whole fleet.
// Staleness is judged by Redis's clock: the remaining PTTL is read with the
// value, in the same round trip (a hit costs a GET and a PTTL, pipelined).
// Stale answers are counted in [Stats].Stale. WithStale panics if max is not
// positive.
func WithStale(max time.Duration) Option {
	if max <= 0 {
		panic(fmt.Sprintf("dogpile: stale window %v is not positive (a programmer error)", max))
	}
	return optionFunc(func(o *options) { o.stale = max })
}

// WithEarlyRefresh refreshes a value in the background before its TTL runs
// out, so that callers of a hot key never wait for a compute: XFetch
// (Vattani, Chierichetti and Lowenstein, VLDB 2015), with the fleet-wide
// compute lock so that only one process refreshes. A value is refreshed once
// its remaining TTL falls below gap = δ·β·(2 − ln u), where δ is how long
// its refresh took (the compute and the lock's and store's round trips) and u
// is uniform in (0, 1]; the gap is capped at a third of the TTL, so a key is
// computed at most 1.5 times per TTL period (about 1.25 when δ is a tenth of
// the TTL).
//
// Unlike the paper, the gap is drawn once per stored value (by the process
// that stores it, and kept in the entry), not on each read. Drawn on each
// read, the chance that some read refreshes early grows with the call rate:
// at thousands of calls a second the refresh starts near δ·β·ln(rate·δ)
// before expiry, several times a TTL period. With one draw per value, every
// process agrees on one refresh point, which neither drifts earlier with
// load nor comes later than 2·δ·β before expiry. The floor leaves with β ≥ 1
// a whole δ of slack for a refresh that starts late or computes slower than
// the last: with a floor of δ·β, callers waited at one or two expiries in
// every run of 21 TTL periods (2 processes, 2,700 calls/s, TTL 300ms, compute
// 30ms); with 2·δ·β, at none in 6 runs, for 1.2 computes per period instead
// of 1.1. The draw also spreads the refreshes of many keys stored at the same
// moment. beta 1 is the paper's default; a larger beta refreshes earlier. A
// hit costs a GET and a PTTL, pipelined.
// WithEarlyRefresh panics if beta is not positive.
func WithEarlyRefresh(beta float64) Option {
	if !(beta > 0) || math.IsInf(beta, 1) {
		panic(fmt.Sprintf("dogpile: early refresh beta %v is not a positive number (a programmer error)", beta))
	}
	return optionFunc(func(o *options) { o.beta = beta })
}

// WithNegativeTTL caches "not found": when compute returns an error matching
// [ErrNotFound], a tombstone is stored for d (fenced like any value), and
// every Fetch of the key in the fleet returns an error matching ErrNotFound
// without computing until d has passed; processes that were waiting for that
// compute get ErrNotFound too. Without it, ErrNotFound is returned to the
// callers and nothing is stored. WithNegativeTTL panics if d is not positive.
func WithNegativeTTL(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("dogpile: negative TTL %v is not positive (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.negativeTTL = d })
}

// defaultRefreshRetry is how long the fleet waits before refreshing a key
// again after a background refresh failed.
const defaultRefreshRetry = time.Second

// WithRefreshRetry sets how long, after a background refresh of a key failed
// (see [WithStale] and [WithEarlyRefresh]), no process refreshes it again in
// the background: at most one call per key per d reaches a failing backend
// from the whole fleet. The default is one second. WithRefreshRetry panics
// if d is below a millisecond.
func WithRefreshRetry(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("dogpile: refresh retry %v is below 1ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.refreshRetry = d })
}

// WithLogger makes the Cache log its rare events to l: an outage of Redis
// beginning and ending (see [ErrUnavailable]), a compute lock taken over
// from a holder that vanished, stored bytes that do not decode, a compute
// that panicked (with its stack, which no other process receives). Hits,
// misses and computes are never logged; count them with [Cache.Stats] or
// observe them with [WithObserver]. By default a Cache logs nothing.
// WithLogger panics if l is nil.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("dogpile: nil logger (a programmer error)")
	}
	return optionFunc(func(o *options) { o.logger = l })
}
