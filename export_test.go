package dogpile

import "github.com/redis/go-redis/v9"

// This file exports to package dogpile_test what its tests need of the
// package's internals; it is compiled into the test binary only. The
// behaviour tests go through the public API and these few seams.

// WithNearTest is withNear(nearTest()): the near tier's config of this
// package's tests, for those of package dogpile_test (see nearTest).
func WithNearTest() Option { return withNear(nearTest()) }

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
	return Keys{Value: ks.value, Lock: ks.lock, Errs: ks.errs, Channel: ks.channel, Throttle: ks.throttle}
}

// Client returns the client c was made with.
func Client[T any](c *Cache[T]) redis.UniversalClient { return c.client }

// Flights returns how many flights of c run (a background refresh outlives
// the Fetch that started it).
func Flights[T any](c *Cache[T]) int {
	c.flights.mu.Lock()
	defer c.flights.mu.Unlock()
	return len(c.flights.m)
}

// ErrComputeTooLong is the cause that ends a compute's context after
// WithMaxCompute's limit.
var ErrComputeTooLong = errComputeTooLong
