package dogpile

import (
	"context"
	"errors"
	"fmt"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/wake"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrMiss is returned by [Cache.Get] when key holds no value, or holds
	// bytes that do not decode (which Fetch would treat as a miss too).
	ErrMiss = errors.New("dogpile: miss")

	// ErrComputeFailed is returned by [Cache.Fetch] to callers that waited
	// for another process's compute when that compute failed (returned an
	// error or panicked). The error's text carries the other process's
	// error message; nothing was cached.
	ErrComputeFailed = errors.New("dogpile: compute failed in another process")
)

// Defaults of the options.
const (
	defaultPrefix = "dogpile:"
	defaultLease  = 5 * time.Second
)

// A Cache is a typed read-through cache of values of type T in Redis, shared
// by every process that uses the same Redis, key prefix and codec.
//
// A Cache is safe for concurrent use. The zero value is not usable; create
// one with [New].
type Cache[T any] struct {
	client  redis.UniversalClient
	opts    options
	publish string // PUBLISH or SPUBLISH, for the scripts
	flights group
	stats   counters

	// onWait, if set, is called when a flight starts waiting for another
	// process's compute (tests use it to order events without sleeping).
	onWait func(key string)
}

// New returns a Cache that keeps values of type T in client's Redis. It
// does no I/O. New panics if client is nil.
//
// client may be a *redis.Client, a *redis.ClusterClient or any other
// [redis.UniversalClient]. All the Redis keys of one cache key share a hash
// tag, so each Fetch touches a single cluster slot.
func New[T any](client redis.UniversalClient, opts ...Option) *Cache[T] {
	if client == nil {
		panic("dogpile: nil redis client")
	}
	c := &Cache[T]{
		client:  client,
		opts:    buildOptions(opts),
		publish: wake.PublishCommand(client),
	}
	c.flights.m = map[string]*call{}
	return c
}

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
}

func buildOptions(opts []Option) options {
	o := options{prefix: defaultPrefix, codec: MsgPack, lease: defaultLease}
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
		panic(fmt.Sprintf("dogpile: prefix %q contains a brace", prefix))
	}
	return optionFunc(func(o *options) { o.prefix = prefix })
}

// WithCodec sets how values are turned into bytes. The default is
// [MsgPack]. Whatever the codec, stored bytes start with a small header
// (magic and format version), so bytes written by something else read as
// a miss. WithCodec panics if codec is nil.
func WithCodec(codec Codec) Option {
	if codec == nil {
		panic("dogpile: nil codec")
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
		panic(fmt.Sprintf("dogpile: lease %v is below 10ms", d))
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
		panic("dogpile: max compute must be positive")
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
		panic("dogpile: negative wait timeout")
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

// Stats are counters of a Cache since New. All counts are per process.
type Stats struct {
	Hits          uint64 // Fetch and Get calls that found a value in Redis at once
	Misses        uint64 // Fetch and Get calls that did not
	Computes      uint64 // compute calls made by this process
	Waits         uint64 // flights that waited for another process's compute
	PushWakeups   uint64 // waits ended by a pub/sub message
	PollWakeups   uint64 // waits ended by the holder's lease running out (no message)
	Takeovers     uint64 // compute locks won after the previous holder vanished without a result
	DecodeErrors  uint64 // stored values that did not decode (treated as misses)
	ComputeErrors uint64 // compute calls that returned an error or panicked
	Shared        uint64 // Fetch calls that joined a flight already running in this process
	RemoteErrors  uint64 // flights told that another process's compute failed
}

type counters struct {
	hits, misses, computes, waits, push, poll, takeovers,
	decodeErrors, computeErrors, shared, remoteErrors atomic.Uint64
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache[T]) Stats() Stats {
	s := &c.stats
	return Stats{
		Hits: s.hits.Load(), Misses: s.misses.Load(), Computes: s.computes.Load(),
		Waits: s.waits.Load(), PushWakeups: s.push.Load(), PollWakeups: s.poll.Load(),
		Takeovers: s.takeovers.Load(), DecodeErrors: s.decodeErrors.Load(),
		ComputeErrors: s.computeErrors.Load(), Shared: s.shared.Load(),
		RemoteErrors: s.remoteErrors.Load(),
	}
}

// keys are the Redis names of one cache key. They share the hash tag
// "{...}", so they land in one cluster slot and one script may touch all.
type keys struct {
	value   string // the encoded value, with the caller's TTL
	lock    string // compute lock: the holder's token, with the lease as TTL
	errs    string // hash {token: error text} of recently failed computes
	channel string // wake-ups: a value was stored, a compute failed, ...
}

func (c *Cache[T]) keys(key string) keys { return keysFor(c.valueKey(key)) }

// keysFor derives the other names of a cache key from its value key. Only
// the miss path needs them: a hit builds the value key alone.
func keysFor(value string) keys {
	return keys{value: value, lock: value + ":lock", errs: value + ":err", channel: value + ":wake"}
}

// valueKey is the Redis key of the value cached under key.
func (c *Cache[T]) valueKey(key string) string {
	if key == "" {
		panic("dogpile: empty key")
	}
	return c.opts.prefix + redisutil.Tag(key)
}

// Get returns the value cached under key. It returns an error matching
// [ErrMiss] if there is none, or if the stored bytes do not decode; other
// errors come from Redis, wrapped. Get panics if key is empty.
func (c *Cache[T]) Get(ctx context.Context, key string) (T, error) {
	var zero T
	b, err := c.client.Get(ctx, c.valueKey(key)).Bytes()
	switch {
	case err == redis.Nil:
		c.stats.misses.Add(1)
		return zero, ErrMiss
	case err != nil:
		return zero, redisErr(ctx, "get", key, err)
	}
	v, err := c.decode(b)
	if err != nil {
		c.stats.misses.Add(1)
		return zero, fmt.Errorf("%w: %q: %v", ErrMiss, key, err)
	}
	c.stats.hits.Add(1)
	return v, nil
}

// Set stores v under key for ttl. A compute of key running anywhere at that
// moment loses its lock: its result is not stored over v (it is still
// returned to its own callers), and processes waiting for it read v at
// once. Set panics if key is empty or ttl is below a millisecond.
func (c *Cache[T]) Set(ctx context.Context, key string, v T, ttl time.Duration) error {
	checkTTL(ttl)
	ks := c.keys(key)
	b, err := c.encode(v)
	if err != nil {
		return fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	err = setScript.Run(ctx, c.client, []string{ks.value, ks.lock, ks.channel}, b, redisutil.Millis(ttl), c.publish).Err()
	if err != nil {
		return redisErr(ctx, "set", key, err)
	}
	return nil
}

// Delete removes the value cached under key, if any. Like [Cache.Set], it
// also takes the compute lock away from a compute of key running at that
// moment, so a value computed from data older than the Delete is not
// stored; processes waiting for that compute start a new one. Delete
// panics if key is empty.
func (c *Cache[T]) Delete(ctx context.Context, key string) error {
	ks := c.keys(key)
	err := deleteScript.Run(ctx, c.client, []string{ks.value, ks.lock, ks.channel}, c.publish).Err()
	if err != nil {
		return redisErr(ctx, "delete", key, err)
	}
	return nil
}

func checkTTL(ttl time.Duration) {
	if ttl < time.Millisecond {
		panic(fmt.Sprintf("dogpile: TTL %v is below 1ms", ttl))
	}
}

// redisErr reports a failed round trip. A done context wins, unwrapped, so
// callers can compare it with ==, as with the standard library.
func redisErr(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("dogpile: %s %q: %w", op, key, err)
}
