package dogpile

// What a Cache tells its callers: the errors its calls return, the events
// an observer receives, the counters Stats reads, and its hot keys.

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/breaker"
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

// Stats are counters of a Cache since New, in this process. Most count the
// events an observer receives (see [WithObserver] and each field); the wake-up,
// takeover, decode-error, shared, unavailable, near-tier and check counters
// count where they happen.
type Stats struct {
	Hits          uint64 // Fetch and Get calls (and FetchMany keys) that found a value at once, in Redis or in the near tier
	Misses        uint64 // Fetch and Get calls (and FetchMany keys) that did not
	Computes      uint64 // compute calls made by this process (one per FetchMany batch)
	Waits         uint64 // flights that waited for another process's compute
	PushWakeups   uint64 // wake-ups of waits by a pub/sub message
	PollWakeups   uint64 // wake-ups of waits by the holder's lease running out (no message)
	Takeovers     uint64 // compute locks won after the previous holder vanished without a result
	DecodeErrors  uint64 // stored values that did not decode (treated as misses)
	ComputeErrors uint64 // compute calls that returned an error or panicked, but not because Close ended them
	Shared        uint64 // Fetch calls that joined a flight already running in this process
	RemoteErrors  uint64 // flights told that another process's compute failed
	Stale         uint64 // hits answered with a value past its TTL (WithStale)
	NotFound      uint64 // calls (and FetchMany keys) answered "not found": a tombstone (in Hits too) or a compute that found nothing (in Misses too); not in Stale, ComputeErrors or RemoteErrors
	Refreshes     uint64 // background refreshes (stale or early) this process computed
	Unavailable   uint64 // round trips skipped, Redis being unreachable (see ErrUnavailable); callers that share a flight share one

	// The near tier (see WithNearCache).
	NearHits          uint64 // hits answered from process memory (counted in Hits too)
	NearInvalidations uint64 // keys Redis reported written, expired or evicted
	NearFlushes       uint64 // times the tier was emptied: tracking lost, or FLUSHALL (with WithStaleIfDown, kept until tracking is back)
	NearLate          uint64 // Fetch calls (and FetchMany keys) that bypassed the tier, its invalidations late (no answer to a ping within 100 ms)
	StaleIfDown       uint64 // Fetch calls answered, Redis unreachable, with a copy the tier kept (WithStaleIfDown); in Hits, Stale and NearHits too
	NearOff           bool   // the near tier is off: Redis or the client cannot track keys (logged once)

	// Checks of sampled hits (see WithConsistencySampling and WithSourceCheck).
	NearSampled        uint64 // near hits checked against Redis
	NearInconsistent   uint64 // of those, hits whose value Redis had replaced and the tier still served past its bound
	SourceSampled      uint64 // hits checked against the source of truth
	SourceInconsistent uint64 // of those, hits that disagreed with the source while Redis kept the value served
}

type counters struct {
	hits, misses, computes, waits, push, poll, takeovers,
	decodeErrors, computeErrors, shared, remoteErrors, stale, notFound, refreshes, unavailable, nearHits, staleIfDown atomic.Uint64
	nearOff atomic.Bool
}

// A HotKey is a key of a Cache and what this process did for it over the
// last one to two minutes, as [Cache.HotKeys] reports it.
type HotKey struct {
	// Key is the caller's key, as passed to Fetch, FetchMany or Get (not
	// the Redis key).
	Key string
	// Reads estimates the Fetch and Get calls (and FetchMany keys) that
	// read Key: its hits and its misses. Hits are sampled, one in 64 of
	// the Cache's, each sample counting 64 (see [Cache.HotKeys] for the
	// error); misses are counted one by one.
	Reads uint64
	// Misses, Computes and Waits count Key's misses (in Reads too), compute
	// calls (each FetchMany compute counts once for each of its keys) and
	// waits for another process's compute, exactly, since Key last entered
	// the report's summary: lower bounds.
	Misses, Computes, Waits uint64
}
