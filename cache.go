package dogpile

import (
	"context"
	"errors"
	"fmt"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/breaker"
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

	// ErrNotFound is what compute returns (wrapped or not) to say that the
	// value does not exist, as opposed to failing. Fetch returns it to every
	// caller waiting for that compute, in every process; with
	// [WithNegativeTTL] it is also remembered, so that the backend is not
	// asked again for a while. Get returns it for a key whose remembered
	// answer is "not found".
	ErrNotFound = errors.New("dogpile: not found")

	// ErrInvalid is returned for an argument that may come from data rather
	// than from the program: an empty key, or a TTL below a millisecond. The
	// error names the argument; nothing is read or written.
	ErrInvalid = errors.New("dogpile: invalid argument")
)

// notFound is the error of a key whose answer is a not-found tombstone.
func notFound(key string) error { return fmt.Errorf("%w: %q", ErrNotFound, key) }

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

	// attempts bounds the lock attempts in flight (see lockAttempts).
	attempts chan struct{}
	loaded   sync.Map         // *redis.Script → true once run by this Cache (see run)
	breaker  *breaker.Breaker // the client's (see ErrUnavailable)
	near     *near[T]         // WithNearCache; nil: none

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
		panic("dogpile: nil redis client (a programmer error)")
	}
	c := &Cache[T]{
		client:   client,
		opts:     buildOptions(opts),
		publish:  wake.PublishCommand(client),
		attempts: make(chan struct{}, lockAttempts(client)),
		breaker:  breaker.For(client),
	}
	c.flights.m = map[flightID]*call{}
	if c.opts.nearEntries > 0 {
		c.near = newNear(c)
	}
	return c
}

// lockAttempts is how many lock attempts (fetch and refresh scripts) a
// Cache sends at once: half its client's connection pool. When many keys
// miss at once, the store of a finished compute, the one command that wakes
// every waiting process, must not queue in the pool behind lock attempts for
// keys that missed later (head-of-line blocking: measured at 108 ms p50 per
// store with 1000 keys in flight across 4 processes). Lock attempts wait
// for their turn in the Cache instead; hits, stores and releases are not
// limited, and always find a connection.
func lockAttempts(client redis.UniversalClient) int {
	size := 10 * runtime.GOMAXPROCS(0) // go-redis's default for a Client
	switch c := client.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize
	case *redis.Ring:
		size = c.Options().PoolSize
	}
	return max(1, size/2)
}

// admit waits for a turn to send a lock attempt; done gives it back.
func (c *Cache[T]) admit(ctx context.Context) error {
	select {
	case c.attempts <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Cache[T]) done() { <-c.attempts }

// Stats are counters of a Cache since New. All counts are per process.
type Stats struct {
	Hits          uint64 // Fetch and Get calls (and FetchMany keys) that found a value at once, in Redis or in the near tier
	Misses        uint64 // Fetch and Get calls (and FetchMany keys) that did not
	Computes      uint64 // compute calls made by this process (one per FetchMany batch)
	Waits         uint64 // flights that waited for another process's compute
	PushWakeups   uint64 // waits ended by a pub/sub message
	PollWakeups   uint64 // waits ended by the holder's lease running out (no message)
	Takeovers     uint64 // compute locks won after the previous holder vanished without a result
	DecodeErrors  uint64 // stored values that did not decode (treated as misses)
	ComputeErrors uint64 // compute calls that returned an error or panicked
	Shared        uint64 // Fetch calls that joined a flight already running in this process
	RemoteErrors  uint64 // flights told that another process's compute failed
	Stale         uint64 // hits answered with a value past its TTL (WithStale)
	Refreshes     uint64 // background refreshes (stale or early) this process computed
	Unavailable   uint64 // round trips skipped, Redis being unreachable (see ErrUnavailable); callers that share a flight share one

	// The near tier (see WithNearCache).
	NearHits          uint64 // hits answered from process memory (counted in Hits too)
	NearInvalidations uint64 // keys Redis reported written, expired or evicted
	NearFlushes       uint64 // times the tier was emptied: tracking lost, or FLUSHALL
	NearOff           bool   // the near tier is off: Redis or the client cannot track keys (logged once)
}

type counters struct {
	hits, misses, computes, waits, push, poll, takeovers,
	decodeErrors, computeErrors, shared, remoteErrors, stale, refreshes, unavailable, nearHits atomic.Uint64
	nearOff atomic.Bool
}

// Stats returns a snapshot of the Cache's counters.
func (c *Cache[T]) Stats() Stats {
	s := &c.stats
	st := Stats{
		Hits: s.hits.Load(), Misses: s.misses.Load(), Computes: s.computes.Load(),
		Waits: s.waits.Load(), PushWakeups: s.push.Load(), PollWakeups: s.poll.Load(),
		Takeovers: s.takeovers.Load(), DecodeErrors: s.decodeErrors.Load(),
		ComputeErrors: s.computeErrors.Load(), Shared: s.shared.Load(),
		RemoteErrors: s.remoteErrors.Load(), Stale: s.stale.Load(), Refreshes: s.refreshes.Load(),
		Unavailable: s.unavailable.Load(), NearHits: s.nearHits.Load(), NearOff: s.nearOff.Load(),
	}
	if c.near != nil {
		st.NearInvalidations, st.NearFlushes = c.near.x.invalidations.Load(), c.near.x.flushes.Load()
	}
	return st
}

// keys are the Redis names of one cache key. They share the hash tag
// "{...}", so they land in one cluster slot and one script may touch all.
type keys struct {
	value    string // the encoded value, with the caller's TTL
	lock     string // compute lock: the holder's token, with the lease as TTL
	errs     string // hash {token: error text} of recently failed computes
	channel  string // wake-ups: a value was stored, a compute failed, ...
	throttle string // set for the retry interval after a failed refresh
}

func (c *Cache[T]) keys(key string) keys { return keysFor(c.valueKey(key)) }

// keysFor derives the other names of a cache key from its value key. Only
// the miss path needs them: a hit builds the value key alone.
func keysFor(value string) keys {
	return keys{value: value, lock: value + ":lock", errs: value + ":err", channel: value + ":wake", throttle: value + ":retry"}
}

// valueKey is the Redis key of the value cached under key (see checkKey).
// A key without braces, the common case, is joined in one allocation (it
// is on every hit's path: a FetchMany of 100 hits spent 8% of its time
// here with two).
func (c *Cache[T]) valueKey(key string) string {
	return redisutil.Key(c.opts.prefix, key)
}

// Get returns the value cached under key. It returns an error matching
// [ErrMiss] if there is none, or if the stored bytes do not decode, and one
// matching [ErrNotFound] if the key holds a not-found tombstone (see
// [WithNegativeTTL]); an empty key, one matching [ErrInvalid]; other errors
// come from Redis, wrapped. With [WithStale], Get returns a stale value as it
// is, and refreshes nothing.
func (c *Cache[T]) Get(ctx context.Context, key string) (T, error) {
	var zero T
	if err := checkKey(key); err != nil {
		return zero, err
	}
	var b []byte
	err := c.guard(ctx, func() (err error) {
		b, err = c.client.Get(ctx, c.valueKey(key)).Bytes()
		return err
	})
	switch {
	case err == redis.Nil:
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		return zero, ErrMiss
	case err != nil:
		return zero, redisErr(ctx, "get", key, err)
	}
	v, m, err := c.decodeEntry(b)
	if err != nil {
		c.decodeError(ctx, key, err)
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		return zero, fmt.Errorf("%w: %q: %v", ErrMiss, key, err)
	}
	c.emit(ctx, Event{Kind: EventHit, Key: key})
	if m.notFound {
		return zero, notFound(key)
	}
	return v, nil
}

// Set stores v under key for ttl. A compute of key running anywhere at that
// moment loses its lock: its result is not stored over v (it is still
// returned to its own callers), and processes waiting for it read v at
// once. With [WithStale], v stays in Redis for ttl plus the stale window,
// like a computed value. An empty key or a ttl below a millisecond returns
// an error matching [ErrInvalid].
func (c *Cache[T]) Set(ctx context.Context, key string, v T, ttl time.Duration) error {
	if err := checkTTL(key, ttl); err != nil {
		return err
	}
	ks := c.keys(key)
	b, err := c.encode(v)
	if err != nil {
		return fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	err = c.guard(ctx, func() error {
		return c.run(ctx, setScript, []string{ks.value, ks.lock, ks.channel}, b, redisutil.Millis(ttl+c.opts.stale), c.publish).Err()
	})
	c.nearForget(ks.value)
	if err != nil {
		return redisErr(ctx, "set", key, err)
	}
	return nil
}

// Delete removes the value cached under key, if any. Like [Cache.Set], it
// also takes the compute lock away from a compute of key running at that
// moment, so a value computed from data older than the Delete is not
// stored; processes waiting for that compute start a new one. An empty key
// returns an error matching [ErrInvalid].
func (c *Cache[T]) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	ks := c.keys(key)
	err := c.guard(ctx, func() error {
		return c.run(ctx, deleteScript, []string{ks.value, ks.lock, ks.channel}, c.publish).Err()
	})
	c.nearForget(ks.value)
	if err != nil {
		return redisErr(ctx, "delete", key, err)
	}
	return nil
}

// checkKey and checkTTL reject arguments that may come from data with an
// error matching ErrInvalid, not a panic: a server must not crash on a
// request's input.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return nil
}

func checkTTL(key string, ttl time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl %v for %q is below 1ms", ErrInvalid, ttl, key)
	}
	return nil
}

// redisErr reports a failed round trip. A done context wins, unwrapped, so
// callers can compare it with ==, as with the standard library.
func redisErr(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("dogpile: %s %q: %w", op, key, err)
}
