package memcache

import (
	"fmt"
	"time"
)

// An Option configures a [Mutex]. The names and meanings are those of the
// lock package's options, and like them (and the cache's) an option given
// a bad value panics: options are the program's, not data.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	ttl         time.Duration
	waitTimeout time.Duration
	minBackoff  time.Duration
	maxBackoff  time.Duration
	autoExtend  bool
}

func buildOptions(opts []Option) options {
	o := options{ttl: 10 * time.Second, minBackoff: 2 * time.Millisecond, maxBackoff: 500 * time.Millisecond}
	for _, opt := range opts {
		opt.apply(&o)
	}
	return o
}

// WithTTL sets how long a lease lives in memcached unless it is extended:
// a holder that dies frees the lock after at most this long, plus up to
// two seconds of rounding (see the package doc on whole-second expiries).
// The default is 10 seconds. d must be at least 1 s and at most 30 days
// less 2 s: memcached reads a longer expiry, once rounded up, as a Unix
// time, and the lock would expire at once.
func WithTTL(d time.Duration) Option {
	if err := checkTTL(d); err != nil {
		panic(fmt.Sprintf("lock/memcache: %v (a programmer error)", err))
	}
	return optionFunc(func(o *options) { o.ttl = d })
}

// WithWaitTimeout bounds how long Lock waits, on top of its context's
// deadline. When it passes, Lock returns an error matching
// [ErrNotObtained] and [context.DeadlineExceeded]. The default is to wait
// as long as the context allows; use TryLock for no waiting. d must not be
// negative.
func WithWaitTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("lock/memcache: negative wait timeout %v (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.waitTimeout = d })
}

// WithBackoff sets the bounds of the jittered exponential backoff between
// a waiter's attempts: each wait is drawn at random below a bound that
// doubles from min to max. Memcached cannot wake waiters, so max is about
// the longest a waiter may notice a released lock late. The default is
// 2ms to 500ms. It needs 0 < min <= max.
func WithBackoff(min, max time.Duration) Option {
	if min <= 0 || max < min {
		panic(fmt.Sprintf("lock/memcache: backoff %v..%v needs 0 < min <= max (a programmer error)", min, max))
	}
	return optionFunc(func(o *options) { o.minBackoff, o.maxBackoff = min, max })
}

// WithAutoExtend makes every lease extend itself by its TTL every third of
// the TTL while held (a watchdog), so work may outlast the TTL while a
// crashed holder still frees the lock within one TTL. A failed extension
// is retried promptly; when one is refused (the key no longer holds the
// lease's token), or none is confirmed before the lease's safe deadline,
// the lease is lost: [Lease.Done] closes and [Lease.Err] returns
// [ErrLost]. The watchdog stops before Unlock returns.
func WithAutoExtend() Option {
	return optionFunc(func(o *options) { o.autoExtend = true })
}
