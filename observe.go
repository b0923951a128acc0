package dogpile

// What a Cache tells its callers: the errors its calls return, and the
// events an observer receives, counted on their way in Stats and the
// hot-key report.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"time"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/hotkeys"
)

var (
	// ErrMiss is returned by [Cache.Get] when key holds no value, or holds
	// what does not decode (which Fetch would treat as a miss too).
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

	// ErrUnavailable is returned, wrapped, by calls that did not go to Redis
	// because a server of the client was found down moments ago; its message
	// names the server and why ("redis unavailable: 10.0.0.7:6379: no reply to
	// PING within 500ms"). A refused dial, a broken connection or a timeout makes
	// the client's breaker PING its servers; one that refuses or stays silent for
	// half a second opens the circuit, and every Cache and lock on the client then
	// fails at once until a PING, tried every 100 ms, is answered. A busy client
	// opens nothing. docs/design.md, "The circuit breaker", tells more;
	// lock.ErrUnavailable is the same error.
	ErrUnavailable = breaker.ErrUnavailable
)

// notFound is the error of a key whose answer is a not-found tombstone.
func notFound(key string) error { return fmt.Errorf("%w: %q", ErrNotFound, key) }

// ErrClosed is returned by the calls of a Cache after [Cache.Close].
var ErrClosed = errors.New("dogpile: cache closed")

// errComputeTooLong is the cause that ends compute's context after the
// bound set by WithMaxCompute (see Cache.tooLong).
var errComputeTooLong = errors.New("dogpile: compute ran past its limit")

// errLeaseLost is the cancellation cause of compute's context when the
// compute lock was lost.
var errLeaseLost = errors.New("dogpile: compute lock lost")

// errRefused is store's answer when nothing was stored because the lock no
// longer held our token (a Set, Delete or InvalidateTag took it, or the
// lease ran out and another process took over), or because an
// InvalidateTag of a tag compute gave the value came after compute tagged
// it (the lock was then released). The flight looks again (see
// computeHeld).
var errRefused = errors.New("dogpile: store refused")

// A panicError is a compute's panic. Its text carries the panic value only:
// it reaches the callers and, cut to 512 bytes, the other processes; the
// stack goes to the log (see WithLogger).
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("dogpile: compute panicked: %v", e.value) }

// errComputeEnded ends a compute lease whose compute returned.
var errComputeEnded = errors.New("dogpile: compute ended")

// errRetry ends a flight whose first caller gave up during the GET: the
// callers that joined it start over (one of them leads the next flight).
var errRetry = errors.New("dogpile: retry")

// tooLarge is the error of an encoded value above WithMaxValueSize. It
// matches ErrInvalid without repeating its prefix after the caller's.
type tooLarge struct{ n, max int }

func (e tooLarge) Error() string {
	return fmt.Sprintf("value of %d bytes is above the limit of %d (see WithMaxValueSize)", e.n, e.max)
}

func (tooLarge) Is(target error) bool { return target == ErrInvalid }

// An Event is something a Cache did, handed to the observer set with
// [WithObserver] for metrics and traces. [Cache.Stats] counts them, and a
// few things that have no event of their own (see [Stats]).
type Event struct {
	Kind EventKind
	// Prefix is the Cache's key prefix (see [WithPrefix]): a bounded value,
	// fit to label metrics with.
	Prefix string
	// Key is the key. Keys come from data and are unbounded: put them in
	// traces and logs, never in a metric's attributes.
	Key string
	// Keys are the keys of a FetchMany compute (ComputeStart, ComputeEnd):
	// one compute call for them all, so one event; Key is then the first.
	Keys []string
	// Tags are the tags of an InvalidateTag (EventInvalidateTag). Tags come
	// from data, as keys do: never put them in a metric's attributes.
	Tags []string
	// Stale reports a hit on a value past its TTL (see [WithStale]).
	Stale bool
	// NotFound reports that the answer is "not found" (see [ErrNotFound]):
	// a cached tombstone (EventHit), a compute that found nothing
	// (EventMiss; EventComputeEnd, whose Err is then compute's not-found
	// error), or an awaited compute that found nothing (EventWaitEnd, with
	// WakeFailed). Not found is an answer, not a failure.
	NotFound bool
	// Near reports a hit answered from process memory (see
	// [WithNearCache]), without a round trip to Redis.
	Near bool
	// Refresh reports a compute that refreshes a value in the background
	// (see [WithStale] and [WithEarlyRefresh]).
	Refresh bool
	// Took is how long the compute or the wait took (ComputeEnd, WaitEnd).
	Took time.Duration
	// Err is the compute's error (ComputeEnd), or the error the wait ended
	// with (WaitEnd). A compute that fails once [Cache.Close] ended its
	// context ends with ErrClosed: a shutdown, not a failure.
	Err error
	// Wake tells how a wait ended (WaitEnd).
	Wake Wake
}

// An EventKind says what an [Event] reports.
type EventKind int

const (
	EventHit          EventKind = iota + 1 // a caller got a value from Redis (Stale: past its TTL) or from the near tier (Near)
	EventMiss                              // a caller found no value and got one from a compute
	EventComputeStart                      // this process starts compute (it holds the compute lock)
	EventComputeEnd                        // compute returned (Took, Err)
	EventWaitStart                         // this process waits for another process's compute
	EventWaitEnd                           // the wait ended (Took, Wake, Err)
	// EventInvalidate: Redis said that a write (by any client) or an expiry
	// changed Key, so the near tier dropped its copy, if it had one (see
	// [WithNearCache]); Key is empty when the whole tier was emptied
	// (tracking lost, or FLUSHALL). Reported on the goroutine that receives
	// Redis's invalidations: keep the observer fast, or invalidations queue
	// behind it. A key with a brace is reported as the Redis key holding it.
	EventInvalidate
	// EventInvalidateTag: an InvalidateTag of Tags, which took Took, made
	// every value tagged with them a miss (see [Cache.InvalidateTag]).
	EventInvalidateTag
	// EventInconsistent: a sampled hit of Key was found inconsistent, by
	// [WithConsistencySampling] (Near: the near tier served a value that
	// Redis had replaced, past its bound) or by [WithSourceCheck] (Near
	// false: the source of truth disagrees with the value served, and no
	// write of the cache followed). Reported on the Cache's checking
	// goroutine, well after the hit.
	EventInconsistent
)

// A Wake tells how a wait for another process's compute ended.
type Wake int

const (
	WakePush     Wake = iota + 1 // a message from Redis carried or announced the value
	WakePoll                     // the holder's lease ran out with no message; the value was read again
	WakeTakeover                 // the holder vanished without a result: this process took the lock over
	WakeFailed                   // the holder's compute failed (ErrComputeFailed, ErrNotFound)
	WakeTimeout                  // the wait timeout passed or every caller left
	WakeError                    // Redis failed
)

// emit is where every Event goes: the Stats counters (tally), then the
// observer. It returns the context to use from here (see WithObserver).
func (c *core[T]) emit(ctx context.Context, e Event) context.Context {
	c.tally(&e)
	return c.observe(ctx, e)
}

// emitRead emits e, a hit whose entry b was read from Redis, and offers it
// to WithSourceCheck's checker, picked by the hit count its own tally gave
// it (as near hits are, in tally): a count read afterwards is shared by
// hits that raced, which would be picked or passed over together. stale
// is whether b is past its TTL, which a stale hit's check would only
// confirm; unread, that the caller did not read it (Get), so that a picked
// hit reads it from b's expiry (see staleRead), and the others pay nothing.
func (c *core[T]) emitRead(ctx context.Context, e Event, b []byte, stale, unread bool) {
	n := c.tally(&e)
	c.observe(ctx, e)
	if k := c.checks; k != nil && !stale && check.Mix(n) < k.limit && !(unread && c.staleRead(b)) {
		c.sampleRead(e.Key, b, n)
	}
}

// tally counts e in Stats and in the hot-key report, and returns the hit
// count of a hit (0 for other events). Misses, computes and waits cost a
// round trip at least and are recorded every time, so that their counts
// are exact; a hit is recorded if it is sampled (see hotkeys.Sampled),
// with the sample's weight: a near hit costs about a hundred nanoseconds,
// a record about 70.
func (c *core[T]) tally(e *Event) (n uint64) {
	s := &c.stats
	var d hotkeys.Counts
	switch e.Kind {
	case EventHit:
		n = s.hits.Add(1)
		if hotkeys.Sampled(n) {
			d.Reads = hotkeys.SampleRate
		}
		if e.Stale {
			s.stale.Add(1)
		}
		if e.Near {
			s.nearHits.Add(1)
			if k := c.checks; k != nil && !e.Stale && check.Mix(n) < k.limit {
				c.sampleNear(e.Key, n) // one hit in many (see sampleNear)
			}
		}
		if e.NotFound {
			s.notFound.Add(1)
		}
	case EventMiss:
		s.misses.Add(1)
		d = hotkeys.Counts{Reads: 1, Misses: 1}
		if e.NotFound {
			s.notFound.Add(1)
		}
	case EventComputeStart:
		s.computes.Add(1)
		d.Computes = 1
		if e.Refresh {
			s.refreshes.Add(1)
		}
	case EventComputeEnd:
		if e.Err != nil && !e.NotFound && !errors.Is(e.Err, ErrClosed) {
			s.computeErrors.Add(1)
		}
	case EventWaitStart:
		s.waits.Add(1)
		d.Waits = 1
	case EventWaitEnd:
		if e.Wake == WakeFailed && !e.NotFound {
			s.remoteErrors.Add(1)
		}
	}
	if d != (hotkeys.Counts{}) {
		c.hot.AddEach(e.Key, e.Keys, d) // a FetchMany compute: one for each key
	}
	return n
}

// observe hands e to the observer, if any (see WithObserver).
func (c *core[T]) observe(ctx context.Context, e Event) context.Context {
	if c.opts.observer == nil {
		return ctx
	}
	e.Prefix = c.opts.prefix
	if r := c.opts.observer(ctx, e); r != nil {
		return r
	}
	return ctx
}

// log logs a rare event (see WithLogger).
func (c *core[T]) log(ctx context.Context, level slog.Level, msg, key string, attrs ...slog.Attr) {
	if c.opts.logger == nil {
		return
	}
	attrs = append(attrs, slog.String("prefix", c.opts.prefix), slog.String("key", key))
	c.opts.logger.LogAttrs(ctx, level, msg, attrs...)
}

// count reports a caller's answer: a hit, stale or not, or a miss; either
// may be "not found".
func (c *core[T]) count(ctx context.Context, key string, r outcome, notFound bool) {
	if r.hit {
		c.emitRead(ctx, Event{Kind: EventHit, Key: key, Stale: r.stale, NotFound: notFound}, r.b, r.stale, false)
	} else {
		c.emit(ctx, Event{Kind: EventMiss, Key: key, NotFound: notFound})
	}
}
