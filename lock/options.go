package lock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// An Option configures a lock. Options apply to every primitive in this
// package; each documents what it means and its default.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	ttl         time.Duration
	waitTimeout time.Duration
	minBackoff  time.Duration
	maxBackoff  time.Duration
	autoExtend  bool
	maxHold     time.Duration
	fair        bool
	retention   time.Duration
	retentionMs int64 // the script argument, computed once

	kind, name string // the primitive and the lock's name, for events
	observer   func(context.Context, Event)
	logger     *slog.Logger
	acks       int // WithReplicaAck; 0: none
	ackTimeout time.Duration
	breaker    *breaker.Breaker // the client's; nil for a Redlock (see guarded)

	withdrawWait time.Duration // see withdraw; longer in a test
}

func buildOptions(kind, name string, opts []Option) options {
	var o options
	o.build(kind, name, opts)
	return o
}

// build sets o to the defaults, then opts. A lock that holds its options
// builds them in place: they escape to the heap (opts take a pointer), and
// the lock is there already.
func (o *options) build(kind, name string, opts []Option) {
	*o = options{
		kind:       kind,
		name:       name,
		ttl:        10 * time.Second,
		minBackoff: 2 * time.Millisecond,
		maxBackoff: 500 * time.Millisecond,
		retention:  DefaultRetention,

		withdrawWait: withdrawWait,
	}
	for i, opt := range opts {
		if opt == nil {
			panic(fmt.Sprintf("lock: option %d of %d given to the %s %q is nil (a programmer error)", i+1, len(opts), kind, name))
		}
		opt.apply(o)
	}
	o.retentionMs = redisutil.Millis(o.retention)
}

// WithTTL sets how long a lease lives in Redis unless it is extended: a
// holder that dies frees the lock after at most this long (Ruby
// mario-redis-lock's "autorelease"). The default is 10 seconds. WithTTL panics if d is less
// than a millisecond, the resolution of Redis expiry.
func WithTTL(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("lock: WithTTL(%v): below 1ms, the resolution of Redis expiry (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.ttl = d })
}

// WithWaitTimeout bounds how long a blocking acquire waits, on top of its
// context's deadline (mario-redis-lock's "retry_timeout"). When it passes, the
// acquire returns an error matching [ErrNotObtained] and
// [context.DeadlineExceeded]. The default
// is to wait as long as the context allows; use TryLock for no waiting.
// WithWaitTimeout panics if d is negative.
func WithWaitTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("lock: WithWaitTimeout(%v): negative (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.waitTimeout = d })
}

// WithBackoff sets the bounds of the jittered exponential backoff used
// between attempts when push wake-ups are unavailable (mario-redis-lock's
// "retry_sleep"). Waits never exceed the holder's remaining TTL. The default
// is 2ms to 500ms. WithBackoff panics unless 0 < min <= max.
func WithBackoff(min, max time.Duration) Option {
	if min <= 0 || max < min {
		panic(fmt.Sprintf("lock: WithBackoff(%v, %v): needs 0 < min <= max (a programmer error)", min, max))
	}
	return optionFunc(func(o *options) { o.minBackoff, o.maxBackoff = min, max })
}

// WithAutoExtend makes every lease extend itself by its TTL every third of
// the TTL while held (a watchdog), so work may outlast the TTL while a
// crashed holder still frees the lock within one TTL. Each extension is
// due a third of the TTL after the previous one was sent, however long
// that one took to be confirmed. An extension that fails (a lost reply, a
// timeout) is retried at once with backoff, so network blips cost nothing.
// A [Redlock]'s extension is confirmed once a majority of its servers has
// extended it, without waiting for the rest. When an extension is refused,
// or none is confirmed before the lease's safe deadline, the lease is
// lost: [Lease.Done] closes. The watchdog stops before Unlock returns.
func WithAutoExtend() Option {
	return optionFunc(func(o *options) { o.autoExtend = true })
}

// WithMaxHold caps how long auto-extension may keep a lease alive, counted
// from acquisition: past it the lease expires and is reported lost. It
// bounds the damage of a holder that hangs while its watchdog keeps
// running. The default is no cap. WithMaxHold panics if d is not positive.
func WithMaxHold(d time.Duration) Option {
	if d <= 0 {
		panic(fmt.Sprintf("lock: WithMaxHold(%v): not positive (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.maxHold = d })
}

// WithFair makes a [Mutex] serve its waiters first come, first served, as a
// [Semaphore] of one permit does, instead of whoever retries first after a
// release. A fair mutex costs a few more commands per acquisition. Fair and
// plain Mutex values of one name still exclude each other and share one
// fencing counter, but plain lockers ignore the queue: for fairness, every
// process must use WithFair. Other primitives ignore this option.
func WithFair() Option {
	return optionFunc(func(o *options) { o.fair = true })
}

// DefaultRetention is how long a lock's fencing counter is kept unless
// [WithRetention] says otherwise.
const DefaultRetention = 7 * 24 * time.Hour

// WithRetention sets how long a lock's fencing counter, the one key of a
// lock that outlives its leases, is kept: it expires d after it was created
// and the next acquisition creates it anew, so that locks named per request
// (an order ID, an invoice number) do not accumulate in Redis. Fencing
// numbers are the Redis server's clock in microseconds, or above the
// counter's last number (see the package doc), so they still strictly
// increase per name across the reset, as long as the server's clock has
// not gone back since the last number was drawn. The default is
// [DefaultRetention], 7 days. A [Redlock] has no fencing counter and
// ignores it. WithRetention panics if d is less than a millisecond.
func WithRetention(d time.Duration) Option {
	if d < time.Millisecond {
		panic(fmt.Sprintf("lock: WithRetention(%v): below 1ms (a programmer error)", d))
	}
	return optionFunc(func(o *options) { o.retention = d })
}
