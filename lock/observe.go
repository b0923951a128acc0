package lock

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
)

// An Event is something a lock did, handed to the observer set with
// [WithObserver], for metrics.
type Event struct {
	Kind EventKind
	// Lock is the primitive: "mutex", "semaphore", "rwmutex", "multimutex"
	// or "redlock". A bounded value, fit to label metrics with.
	Lock string
	// Name is the lock's name (names joined by commas for a MultiMutex).
	// Names may come from data (an invoice number): put them in logs and
	// traces, never in a metric's attributes.
	Name string
	// Took is how long an acquire waited (Obtained, NotObtained).
	Took time.Duration
	// Err is why an acquire failed (NotObtained: nil for a busy lock's
	// TryLock) or why a lease ended (Lost).
	Err error
}

// An EventKind says what an [Event] reports.
type EventKind int

const (
	EventObtained    EventKind = iota + 1 // an acquire got the lock (Took: its wait)
	EventNotObtained                      // an acquire gave up, failed, or found the lock busy (TryLock)
	EventExtended                         // a lease was extended (Extend or the watchdog)
	EventLost                             // a lease was lost before it was released
	EventReleased                         // a lease was released by Unlock
)

// WithObserver makes the lock call f with each [Event], synchronously: keep
// f fast, and do not call the lease's methods from it. The module
// github.com/dogpile-go/dogpile/dogpileotel records OpenTelemetry metrics
// with it. WithObserver panics if f is nil.
func WithObserver(f func(ctx context.Context, e Event)) Option {
	if f == nil {
		panic("lock: nil observer (a programmer error)")
	}
	return optionFunc(func(o *options) { o.observer = f })
}

// WithLogger makes the lock log its rare events to l: a lease lost before
// its release, and an outage of Redis beginning and ending (once per
// outage for every lock and cache on the client, see [ErrUnavailable]). Acquires and releases are never logged. By default a
// lock logs nothing. WithLogger panics if l is nil.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		panic("lock: nil logger (a programmer error)")
	}
	return optionFunc(func(o *options) { o.logger = l })
}

// emit is where every Event goes. A zero Lease has no options.
func (o *options) emit(ctx context.Context, e Event) {
	if o == nil {
		return
	}
	if e.Kind == EventLost && o.logger != nil {
		o.logger.LogAttrs(ctx, slog.LevelWarn, "lock: lease lost before its release",
			slog.String("lock", o.kind), slog.String("name", o.name), slog.Any("error", e.Err))
	}
	if o.observer == nil {
		return
	}
	e.Lock, e.Name = o.kind, o.name
	o.observer(ctx, e)
}

// acquired reports the end of an acquire that began at start.
func (o *options) acquired(ctx context.Context, start time.Time, l *Lease, err error) {
	if o.observer == nil {
		return
	}
	k := EventObtained
	if l == nil {
		k = EventNotObtained
	}
	o.emit(ctx, Event{Kind: k, Took: time.Since(start), Err: err})
}

// ErrUnavailable is returned, wrapped with the primitive and its name, by
// an acquire, an Extend or a query that did not go to Redis because a
// server of the client was found down moments ago; it names the server
// and why. Every lock and Cache on the same client then fails at once
// instead of spending go-redis's retries or the caller's deadline, and
// every 100 ms a call waits while the servers are asked again (see
// dogpile.ErrUnavailable, the same error, for the whole story). A Redlock,
// whose servers are independent, has no breaker: each server's round trip
// is bounded instead.
var ErrUnavailable = breaker.ErrUnavailable

// guarded makes one attempt through the client's circuit breaker (none
// for a Redlock, whose servers are independent).
func guarded(ctx context.Context, o *options, try attempt) (*Lease, time.Duration, error) {
	if o.breaker == nil {
		return try(ctx)
	}
	done, err := o.breaker.Allow(ctx)
	if err != nil {
		return nil, 0, o.wrapped("acquire", err)
	}
	l, retry, err := try(ctx)
	done(err)
	return l, retry, err
}

// watch puts the lock o describes behind client's circuit breaker, and
// makes the breaker log its outages to o's logger, if any.
func (o *options) watch(client redis.UniversalClient) {
	o.breaker = breaker.For(client)
	if o.logger != nil {
		o.breaker.AddLogger(o.logger)
	}
}

// guard runs f, a round trip of the lock o describes that takes no lock
// (a query, Extend), through the client's circuit breaker, as guarded
// runs an acquire's.
func (o *options) guard(ctx context.Context, f func() error) error {
	if o.breaker == nil {
		return f()
	}
	done, err := o.breaker.Allow(ctx)
	if err != nil {
		return err
	}
	err = f()
	done(err)
	return err
}

// observe hands the outcome of a lease's round trip that does not ask the
// circuit (a release, a renewal) to the client's breaker: a server found
// dead or frozen there turns the next acquires away at once.
func (o *options) observe(err error) {
	if o.breaker != nil {
		o.breaker.Observe(err)
	}
}

// tryOnce is the one attempt of TryLock and its kin.
func tryOnce(ctx context.Context, o *options, try attempt) (*Lease, bool, error) {
	start := time.Now()
	l, _, err := guarded(ctx, o, try)
	o.acquired(ctx, start, l, err)
	return l, l != nil, err
}
