package dogpile

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile/internal/near"
)

// An Option configures a Cache.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	prefix        string
	codec         Codec
	maxValue      int // WithMaxValueSize
	compressMin   int // WithCompression; 0: never
	lease         time.Duration
	waitTimeout   time.Duration
	maxCompute    time.Duration
	computeIfDown bool

	defaultTTL   time.Duration // WithDefaultTTL: the ttl of a call that passes 0; 0: none
	stale        time.Duration // WithStale: how long past its TTL a value is served
	softTimeout  time.Duration // WithSoftTimeout: how long a stale hit waits for its refresh; 0: not at all
	beta         float64       // WithEarlyRefresh; 0: off
	jitter       float64       // WithTTLJitter; 0: none
	negativeTTL  time.Duration // WithNegativeTTL; 0: not-found results are not stored
	refreshRetry time.Duration // WithRefreshRetry

	nearEntries int         // WithNearCache; 0: no near tier
	staleIfDown bool        // WithStaleIfDown
	near        near.Config // withNear (tests); zero: internal/near's defaults

	logger   *slog.Logger                                 // WithLogger; nil: silent
	observer func(context.Context, Event) context.Context // WithObserver
}

func buildOptions(opts []Option) options {
	o := options{prefix: defaultPrefix, codec: MsgPack, maxValue: defaultMaxValue, lease: defaultLease, refreshRetry: defaultRefreshRetry}
	for i, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("dogpile: option %d of %d given to New is nil (a programmer error)", i+1, len(opts)))
		}
		opt.apply(&o)
	}
	return o
}

// WithPrefix sets the prefix of every Redis key and channel the Cache uses.
// Caches with different prefixes never see each other's values. The default
// is "dogpile:". WithPrefix panics if prefix is empty, which would put the
// Cache's keys among every other program's (and [Cache.Clear] would remove
// theirs that look like its own), or if it contains '{' or '}', which
// would change the hash tag that keeps a key's data in one cluster slot.
func WithPrefix(prefix string) Option {
	switch {
	case prefix == "":
		panic("dogpile: WithPrefix(\"\"): an empty prefix would mix the Cache's keys with every other program's (a programmer error)")
	case strings.ContainsAny(prefix, "{}"):
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

// WithMaxValueSize bounds the size of a value as stored, n bytes counted
// before compression. A larger value is not sent: Set returns an error
// matching [ErrInvalid] that names its size, and Fetch returns the computed
// value with that error and stores nothing. A read refuses an entry that
// claims more, before allocating it, as bytes that do not decode. Processes
// that share a prefix should share n. The default is 64 MiB; WithMaxValueSize
// panics if n is not positive.
func WithMaxValueSize(n int) Option {
	if n <= 0 {
		panic(fmt.Sprintf("dogpile: max value size %d is not positive (a programmer error)", n))
	}
	return optionFunc(func(o *options) { o.maxValue = n })
}

// WithCompression compresses with S2 the encoding of any value longer than
// minBytes, when that makes it shorter: less memory in Redis and on the wire,
// for some CPU on each store and read. Every Cache reads compressed entries,
// with or without this option, so turning it on or off on a running fleet is
// safe. The default is none; WithCompression panics if minBytes is negative.
func WithCompression(minBytes int) Option {
	if minBytes < 0 {
		panic(fmt.Sprintf("dogpile: compression threshold %d is negative (a programmer error)", minBytes))
	}
	return optionFunc(func(o *options) { o.compressMin = max(minBytes, 1) })
}

// WithLease sets the lease of the compute lock: how long a process that
// computes a value holds the lock in Redis without renewing it. The lease
// is renewed every third of its length while compute runs (a failed
// renewal is retried at once, with backoff), so a slow compute is never
// taken over, while a process that dies (or cannot reach Redis for a whole
// lease) loses the lock, and another process takes over, within one lease.
// The default is 5 seconds. WithLease panics if d is below 10ms.
func WithLease(d time.Duration) Option {
	if d < 10*time.Millisecond {
		panic(fmt.Sprintf("dogpile: lease %v is below 10ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.lease = d })
}

// WithMaxCompute bounds how long one compute may keep the compute lock.
// The lease is not renewed past d after the lock was taken, and compute's
// context ends just before, so a compute that hangs (and ignores its
// context) is taken over by another process from then on, instead of
// blocking every process's callers for as long as it hangs. A compute that
// ends past d stores nothing if another process took over, and its callers
// get that process's value. The default is no bound. WithMaxCompute panics
// if d is not positive.
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

// WithStale keeps each value in Redis for max past its TTL and serves it
// meanwhile: a Fetch that finds a value past its TTL returns it at once, and
// one process in the fleet refreshes it in the background. A refresh that
// fails leaves the stale value served until TTL + max, and the key is not
// refreshed again for [WithRefreshRetry]. Staleness is judged by Redis's
// clock. WithStale panics if max is not positive.
func WithStale(max time.Duration) Option {
	if max <= 0 {
		panic(fmt.Sprintf("dogpile: stale window %v is not positive (a programmer error)", max))
	}
	return optionFunc(func(o *options) { o.stale = max })
}

// WithSoftTimeout makes a [Cache.Fetch] that finds a stale value (see
// [WithStale]) wait up to d for its refresh, by this process or another,
// and return the fresh value if it is stored in time, else the stale one
// at d; the refresh goes on in the background either way, and is stored.
// Callers that share the Fetch's flight wait with it. A fast backend's
// new value thus reaches the caller that found the old one, and a slow
// backend costs at most d. Without WithStale it changes nothing; FetchMany
// serves stale values at once. It panics if d is not positive.
func WithSoftTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("dogpile: soft timeout %v is not positive (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.softTimeout = d })
}

// WithEarlyRefresh refreshes a hot key's value in the background shortly
// before its TTL runs out, so that its callers never wait for a compute:
// XFetch (Vattani et al., VLDB 2015), run by one process in the fleet. A
// larger beta refreshes earlier; 1 is the paper's. The refresh point is drawn
// once per stored value, δ·beta·(2 − ln u) before expiry, δ being how long
// the value took to get (compute and two round trips) and u uniform in
// (0, 1]: at least 2·δ·beta, a median of 2.7·δ·beta, under 4.3·δ·beta for
// nine values in ten, never over a third of the TTL (docs/design.md). How
// long before expiry a refresh starts, median (nine in ten under):
//
//	δ        beta 0.5        beta 1          beta 2
//	10 ms    13 ms (22 ms)   27 ms (43 ms)   54 ms (86 ms)
//	100 ms   135 ms (215)    269 ms (430)    539 ms (861)
//	1 s      1.3 s (2.2 s)   2.7 s (4.3 s)   5.4 s (8.6 s)
//
// With a TTL of a minute and δ of 1 s, beta 1 refreshes about 57 s after
// the store. It panics if beta is not positive.
func WithEarlyRefresh(beta float64) Option {
	if !(beta > 0) || math.IsInf(beta, 1) {
		panic(fmt.Sprintf("dogpile: early refresh beta %v is not a positive number (a programmer error)", beta))
	}
	return optionFunc(func(o *options) { o.beta = beta })
}

// WithDefaultTTL makes a ttl of 0, given to [Cache.Fetch],
// [Cache.FetchMany], [Cache.Refresh], [Cache.Set] or [Cache.SetTagged], mean
// d: a Cache whose keys all live as long need not repeat it. Without it a
// ttl of 0 returns an error matching [ErrInvalid], as a negative one always
// does. It panics if d is below a millisecond, Redis's resolution.
func WithDefaultTTL(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("dogpile: default TTL %v is below 1ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.defaultTTL = d })
}

// WithTTLJitter spreads every TTL a value is stored with (by Fetch,
// FetchMany, Refresh, a background refresh, Set, and a not-found tombstone)
// by a random amount of up to ±fraction of it, drawn once per stored
// value, so that keys filled together (after a deploy, by one FetchMany)
// do not all expire together. The stale window is added after the jitter,
// and the early-refresh point is drawn from the jittered TTL.
// WithTTLJitter panics unless 0 < fraction < 1.
func WithTTLJitter(fraction float64) Option {
	if !(fraction > 0 && fraction < 1) {
		panic(fmt.Sprintf("dogpile: TTL jitter %v is not between 0 and 1 (a programmer error)", fraction))
	}
	return optionFunc(func(o *options) { o.jitter = fraction })
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

// Defaults of the options.
const (
	defaultPrefix   = "dogpile:"
	defaultLease    = 5 * time.Second
	defaultMaxValue = 64 << 20 // see WithMaxValueSize
)

// WithObserver makes the Cache call f with each [Event], synchronously, on
// the goroutine that does the work: keep f fast. The context f returns for a
// start event (nil: unchanged) is the one the work runs with and the one its
// end event gets, so a tracer can make spans (see the dogpileotel module).
// WithObserver panics if f is nil.
func WithObserver(f func(ctx context.Context, e Event) context.Context) Option {
	if f == nil {
		panic("dogpile: nil observer (a programmer error)")
	}
	return optionFunc(func(o *options) { o.observer = f })
}
