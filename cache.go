package dogpile

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// Defaults of the options.
const (
	defaultPrefix   = "dogpile:"
	defaultLease    = 5 * time.Second
	defaultMaxValue = 64 << 20 // see WithMaxValueSize
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

	attempts turns                       // bounds the lock attempts in flight
	looks    looks                       // picks a Fetch's first look (see look.go)
	loaded   sync.Map                    // *redis.Script → true once run by this Cache (see run)
	breaker  *breaker.Breaker            // the client's (see ErrUnavailable)
	gets     *roundtrip.Batcher[getCall] // the client's (see getbatch.go)
	near     *nearTier[T]                // WithNearCache; nil: none
	fresh    *freshRead                  // with freshness options or a near tier; nil: none
	life     life                        // what Close ends

	// onWait, if set, is called when a flight starts waiting for another
	// process's compute (tests use it to order events without sleeping).
	onWait func(key string)
	// beforeCompute, if set, is called once the lock is held, before its
	// lease starts (tests stall the whole process there: the lease's
	// watchdog too).
	beforeCompute func(key string)
}

// New returns a Cache that keeps values of type T in client's Redis. It
// does no I/O. New panics if client is nil (a nil *redis.Client too), or
// if an option is nil.
//
// client may be a *redis.Client, a *redis.ClusterClient or any other
// [redis.UniversalClient]. All the Redis keys of one cache key share a hash
// tag, so each Fetch touches a single cluster slot.
func New[T any](client redis.UniversalClient, opts ...Option) *Cache[T] {
	redisutil.MustClient("dogpile", client)
	c := &Cache[T]{
		client:   client,
		opts:     buildOptions(opts),
		publish:  wake.PublishCommand(client),
		attempts: newTurns(client),
		breaker:  breaker.For(client),
		gets:     getBatcherFor(client),
	}
	c.flights.m = map[flightID]*call{}
	c.life.init()
	if c.opts.logger != nil {
		c.breaker.AddLogger(c.opts.logger) // it logs the client's outages
	}
	if c.opts.stale > 0 || c.opts.beta > 0 || c.opts.nearEntries > 0 {
		c.fresh = &freshRead{}
		c.looks.off = true // their hits need the TTL or a tracked read (see look.go)
	}
	if c.opts.nearEntries > 0 {
		c.near = newNear(c)
	}
	return c
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

// valueKey is the Redis key of the value cached under key (see checkKey). A
// key without braces, the common case, is joined in one allocation: it is on
// every hit's path (bench/HISTORY.md, "Figures moved out of code comments").
func (c *Cache[T]) valueKey(key string) string {
	return redisutil.Key(c.opts.prefix, key)
}

// Get returns the value cached under key. It returns an error matching
// [ErrMiss] if there is none, or if what is stored does not decode, and one
// matching [ErrNotFound] if the key holds a not-found tombstone (see
// [WithNegativeTTL]); an empty key, one matching [ErrInvalid]; other errors
// come from Redis, wrapped. With [WithStale], Get returns a stale value as it
// is, and refreshes nothing.
func (c *Cache[T]) Get(ctx context.Context, key string) (T, error) {
	var zero T
	if err := c.checkKey(key); err != nil {
		return zero, err
	}
	var b []byte
	err := c.guard(ctx, func() (err error) {
		b, err = c.get(ctx, c.client, c.valueKey(key))
		return err
	})
	switch {
	case err == redis.Nil:
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		return zero, ErrMiss
	case err != nil:
		return zero, redisutil.Failed(ctx, "dogpile", "get", key, err)
	}
	v, m, err := c.decodeEntry(b)
	if err != nil {
		c.decodeError(ctx, key, err)
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		return zero, fmt.Errorf("%w: %q: %v", ErrMiss, key, err)
	}
	c.emit(ctx, Event{Kind: EventHit, Key: key, NotFound: m.notFound})
	if m.notFound {
		return zero, notFound(key)
	}
	return v, nil
}

// Set stores v under key for ttl. A compute of key running anywhere at that
// moment loses its lock: its result is not stored over v (its own callers
// get v too), and processes waiting for it read v at once. Once Set
// returns, no call of this Cache that starts later returns the value v
// replaced: it does not join a Fetch, FetchMany or Refresh of key that read
// Redis or began its compute before the Set. With [WithStale], v stays in
// Redis for ttl plus the stale window, like a computed value. An empty key
// or a ttl below a millisecond returns an error matching [ErrInvalid].
func (c *Cache[T]) Set(ctx context.Context, key string, v T, ttl time.Duration) error {
	return c.set(ctx, key, v, ttl, nil)
}

// set is Set, and SetTagged with tags.
func (c *Cache[T]) set(ctx context.Context, key string, v T, ttl time.Duration, tags []string) error {
	if err := c.checkTTL(key, ttl); err != nil {
		return err
	}
	ks := c.keys(key)
	b, err := c.encode(v)
	if err != nil {
		return fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	stored := c.jittered(ttl) + c.opts.stale
	calls := append(make([]scriptCall, 0, 1+len(tags)), scriptCall{setScript, []string{ks.value, ks.lock, ks.channel},
		[]any{b, redisutil.Millis(stored), c.publish}})
	calls = append(calls, c.tagCalls(ks.value, stored, tags)...)
	err = c.guard(ctx, func() error {
		if len(calls) == 1 || !c.oneNode() {
			// Where a tag's set and the value live on different nodes,
			// the value first: added to a set before it is stored, it
			// could be voided by an InvalidateTag in between and then
			// stored, out of every set, for good.
			err := c.run(ctx, setScript, calls[0].keys, calls[0].args...).Err()
			if err == nil && len(calls) > 1 {
				err = firstErr(c.runPipelined(ctx, calls[1:]))
			}
			if err != nil && len(calls) > 1 {
				// Stored (or its reply lost) but maybe in no tag's set,
				// where InvalidateTag would never find it: undone, unless
				// a later write replaced it.
				redisutil.Rollback(ctx, func(ctx context.Context) {
					_ = c.run(ctx, undoSetScript, []string{ks.value}, b).Err()
				})
			}
			return err
		}
		return firstErr(c.runPipelined(ctx, calls))
	})
	c.forget(ks.value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "set", key, err)
	}
	return nil
}

// Delete removes the value cached under key, if any. Like [Cache.Set], it
// also takes the compute lock away from a compute of key running at that
// moment, so a value computed from data older than the Delete is not
// stored; processes waiting for that compute start a new one. As after
// Set, no call of this Cache that starts after Delete returns the value it
// removed. An empty key returns an error matching [ErrInvalid].
func (c *Cache[T]) Delete(ctx context.Context, key string) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	ks := c.keys(key)
	err := c.guard(ctx, func() error {
		return c.run(ctx, deleteScript, []string{ks.value, ks.lock, ks.channel}, c.publish).Err()
	})
	c.forget(ks.value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "delete", key, err)
	}
	return nil
}

// forget makes this process read vk afresh after it wrote vk (Set, Delete,
// Refresh): once the write has returned, no later call joins a flight
// whose read or compute may predate it, and the near tier drops its copy
// before Redis's invalidation arrives. Called after the write's reply (or
// failure: it may have been applied), so that a flight started after
// forget reads after the write.
func (c *Cache[T]) forget(vk string) {
	c.flights.forget(vk)
	c.nearForget(vk)
}

// checkKey and checkTTL reject a call on a closed Cache (ErrClosed), and
// arguments that may come from data with an error matching ErrInvalid, not
// a panic: a server must not crash on a request's input.
func (c *Cache[T]) checkKey(key string) error {
	switch {
	case c.life.done():
		return ErrClosed
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return nil
}

func (c *Cache[T]) checkTTL(key string, ttl time.Duration) error {
	if err := c.checkKey(key); err != nil {
		return err
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl %v for %q is below 1ms", ErrInvalid, ttl, key)
	}
	return nil
}

// oneNode reports whether every key lives on one server, so that one
// script may touch a value's keys and its tags' together.
func (c *Cache[T]) oneNode() bool {
	_, ok := c.client.(*redis.Client)
	return ok
}
