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

	nearCheck   float64       // WithConsistencySampling: the fraction of near hits checked; 0: none
	sourceCheck float64       // WithSourceCheck: the fraction of hits checked; 0: none
	verify      any           // WithSourceCheck's verify, a func(context.Context, string) (T, error)
	sourceDelay time.Duration // withSourceDelay (tests); 0: sourceDelay
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

// WithPrefix sets the prefix of every Redis key and channel of the Cache:
// Caches with different prefixes never see each other's values. The default is
// "dogpile:". WithPrefix panics if prefix is empty or contains '{' or '}'.
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

// WithMaxValueSize bounds a value's encoding, before compression, to n bytes
// (by default 64 MiB): a larger one is not stored, and Set, or Fetch with the
// value, returns an error matching [ErrInvalid]; a larger entry reads as bytes
// that do not decode. Processes sharing a prefix should share n. It panics if n
// is not positive.
func WithMaxValueSize(n int) Option {
	if n <= 0 {
		panic(fmt.Sprintf("dogpile: max value size %d is not positive (a programmer error)", n))
	}
	return optionFunc(func(o *options) { o.maxValue = n })
}

// WithCompression stores S2-compressed the encoding of any value longer than
// minBytes, when that makes it shorter. Every Cache reads compressed entries,
// with or without this option, so turning it on or off on a running fleet is
// safe. The default is none; WithCompression panics if minBytes is negative.
func WithCompression(minBytes int) Option {
	if minBytes < 0 {
		panic(fmt.Sprintf("dogpile: compression threshold %d is negative (a programmer error)", minBytes))
	}
	return optionFunc(func(o *options) { o.compressMin = max(minBytes, 1) })
}

// WithLease sets the compute lock's lease: a process that dies mid-compute, or
// cannot reach Redis for a whole lease, loses the lock to another within d; a
// live one keeps it however long compute runs (but see [WithMaxCompute]). The
// default is 5 seconds; WithLease panics if d is below 10ms.
func WithLease(d time.Duration) Option {
	if d < 10*time.Millisecond {
		panic(fmt.Sprintf("dogpile: lease %v is below 10ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.lease = d })
}

// WithMaxCompute bounds how long one compute may keep the compute lock: its
// context ends just before d, and another process may then take over. A compute
// that ends later stores nothing if one did, and its callers get that process's
// value. The default is no bound. WithMaxCompute panics if d is not positive.
func WithMaxCompute(d time.Duration) Option {
	if d <= 0 {
		panic("dogpile: max compute must be positive (a programmer error)")
	}
	return optionFunc(func(o *options) { o.maxCompute = d })
}

// WithWaitTimeout bounds how long a Fetch waits for another process's compute,
// besides its context: past d it returns an error matching
// [context.DeadlineExceeded]. By default it waits as long as its context
// allows. WithWaitTimeout panics if d is negative.
func WithWaitTimeout(d time.Duration) Option {
	if d < 0 {
		panic("dogpile: negative wait timeout (a programmer error)")
	}
	return optionFunc(func(o *options) { o.waitTimeout = d })
}

// WithComputeWhenDown makes Fetch call compute without the cache when Redis
// cannot be reached (a network error, not an error reply): calls in one process
// are still deduplicated, but processes no longer coordinate. By default Fetch
// returns the Redis error, wrapped, and does not compute.
func WithComputeWhenDown() Option {
	return optionFunc(func(o *options) { o.computeIfDown = true })
}

// WithStale keeps each value in Redis for max past its TTL: a Fetch that finds
// it past its TTL returns it at once, while one process in the fleet refreshes
// it in the background (after a failed refresh, not again for
// [WithRefreshRetry]). WithStale panics if max is not positive.
func WithStale(max time.Duration) Option {
	if max <= 0 {
		panic(fmt.Sprintf("dogpile: stale window %v is not positive (a programmer error)", max))
	}
	return optionFunc(func(o *options) { o.stale = max })
}

// WithSoftTimeout makes a [Cache.Fetch] that finds a stale value ([WithStale]),
// and the callers sharing its flight, wait up to d for its refresh by any
// process: the fresh value if stored in time, else the stale one, and the
// refresh goes on. FetchMany never waits. It panics if d is not positive.
func WithSoftTimeout(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("dogpile: soft timeout %v is not positive (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.softTimeout = d })
}

// WithEarlyRefresh makes one process refresh a hot key in the background
// shortly before its TTL runs out, so that its callers never wait for a
// compute. How long before expiry it starts, by beta and δ (how long the value
// took to get): median (nine in ten under), at most a third of the TTL.
//
//	δ        beta 0.5        beta 1          beta 2
//	10 ms    13 ms (22 ms)   27 ms (43 ms)   54 ms (86 ms)
//	100 ms   135 ms (215)    269 ms (430)    539 ms (861)
//	1 s      1.3 s (2.2 s)   2.7 s (4.3 s)   5.4 s (8.6 s)
//
// It panics if beta is not positive.
func WithEarlyRefresh(beta float64) Option {
	if !(beta > 0) || math.IsInf(beta, 1) {
		panic(fmt.Sprintf("dogpile: early refresh beta %v is not a positive number (a programmer error)", beta))
	}
	return optionFunc(func(o *options) { o.beta = beta })
}

// WithDefaultTTL makes a ttl of 0, given to [Cache.Fetch], [Cache.FetchMany],
// [Cache.Refresh], [Cache.Set] or [Cache.SetTagged], mean d; without it, a ttl
// of 0 returns an error matching [ErrInvalid], as a negative one always does.
// It panics if d is below a millisecond, Redis's resolution.
func WithDefaultTTL(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("dogpile: default TTL %v is below 1ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.defaultTTL = d })
}

// WithTTLJitter spreads every TTL a value or tombstone is stored with by a
// random ±fraction at most, drawn per stored value, so that keys filled
// together do not expire together. It panics unless 0 < fraction < 1.
func WithTTLJitter(fraction float64) Option {
	if !(fraction > 0 && fraction < 1) {
		panic(fmt.Sprintf("dogpile: TTL jitter %v is not between 0 and 1 (a programmer error)", fraction))
	}
	return optionFunc(func(o *options) { o.jitter = fraction })
}

// WithNegativeTTL caches "not found": when compute returns an error matching
// [ErrNotFound], a tombstone is stored for d, and until then every Fetch of the
// key in the fleet, waiting or later, returns such an error without computing.
// WithNegativeTTL panics if d is not positive.
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
// ([WithStale], [WithEarlyRefresh]), no process refreshes it again in the
// background. The default is one second; it panics if d is below a millisecond.
func WithRefreshRetry(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("dogpile: refresh retry %v is below 1ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.refreshRetry = d })
}

// WithLogger makes the Cache log to l its rare events only: an outage of Redis
// beginning and ending (see [ErrUnavailable]), a compute lock taken over,
// stored bytes that do not decode, a compute's panic (with its stack), a
// panic of [WithSourceCheck]'s verify. By default a Cache logs nothing.
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

// WithObserver makes the Cache call f with each [Event], synchronously, on the
// goroutine that does the work: keep f fast. The context f returns for a start
// event (nil: unchanged) is the work's and its end event's, so a tracer can
// make spans (see dogpileotel). It panics if f is nil.
func WithObserver(f func(ctx context.Context, e Event) context.Context) Option {
	if f == nil {
		panic("dogpile: nil observer (a programmer error)")
	}
	return optionFunc(func(o *options) { o.observer = f })
}

// WithStaleIfDown makes a Fetch that Redis being unreachable would fail with
// [ErrUnavailable] answer with the near tier's copy instead, as a stale hit
// counted in [Stats].StaleIfDown, up to the value's stale point (its TTL
// plus the stale window). Copies are kept when tracking is lost, never served
// while Redis answers, and dropped when tracking is back. What a partition
// may show: a process cut off from Redis hears of no write, so it may serve
// a value another process replaced or deleted meanwhile, up to that stale
// point. Without both [WithNearCache] and [WithStale] it changes nothing;
// FetchMany and Get are unchanged.
func WithStaleIfDown() Option {
	return optionFunc(func(o *options) { o.staleIfDown = true })
}
