package dogpile

import (
	"errors"
	"fmt"

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
