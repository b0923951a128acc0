package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

var (
	// ErrNotHeld is returned by [Lease.Unlock] and [Lease.Extend] when the
	// lease has expired, was already released, or belongs to another owner.
	// Nothing in Redis was changed. Work done under the lease may have
	// overlapped with another holder's; fencing numbers tell which is newer.
	ErrNotHeld = errors.New("lock: not held")

	// ErrNotObtained is returned by a blocking acquire (Lock, RLock,
	// Acquire) that gave up because its context ended or its wait timeout
	// passed before the lock was free: the lock is busy, not broken. The
	// error also matches the context's error, so errors.Is(err,
	// context.DeadlineExceeded) still tells a timeout from a cancellation.
	// TryLock and its kin report a busy lock as false with a nil error.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrLost is the cause reported by [Lease.Err] once a lease was lost:
	// it expired in Redis, an extension was refused, or no extension was
	// confirmed before the lease's safe deadline.
	ErrLost = errors.New("lock: lease lost")

	// ErrInvalid is returned for an argument that may come from data rather
	// than from the program (an empty lock name, a TTL under a millisecond
	// given to [Lease.Extend]): a server must not crash on a bad request.
	// The error names the argument. Nothing in Redis was touched.
	ErrInvalid = errors.New("lock: invalid argument")
)

// foreign reports whether err is Redis refusing a command on a key that
// holds another type of value: a key of the lock holds data that another
// program wrote there. It is no lock of ours, and no sign of a dead server.
func foreign(err error) bool {
	if err == nil {
		return false // the common case, on every acquire and release: no allocation for errors.As
	}
	var rerr redis.Error
	return errors.Is(err, errNoTTL) || errors.As(err, &rerr) && strings.Contains(rerr.Error(), "WRONGTYPE") // miniredis wraps it in a script error
}

// errNoTTL stands for a lock key holding a value without expiry, which no
// lease of ours ever leaves.
var errNoTTL = errors.New("a value without expiry")

// Every error of a lock's round trip reads `lock: <op> <primitive>
// "<name>": <cause>`, so that a log line says which kind of lock failed
// without the caller's help: "acquire" for every attempt to take a lock
// (whether Redis failed it or the circuit turned it away, see guarded),
// "locked", "available", "upgrade" for the queries, "release", "extend"
// and "ttl" for a lease's calls.

// failed reports the failed round trip of op on the lock o describes. A
// done context wins, unwrapped (see redisutil.Failed).
func (o *options) failed(ctx context.Context, op string, err error) error {
	return redisutil.Failed(ctx, "lock", op+" "+o.kind, o.name, inner{err})
}

// wrapped is err as the failure of op on the lock o describes, whether or
// not a context ended: `lock: <op> <primitive> "<name>": <err>`.
func (o *options) wrapped(op string, err error) error {
	return fmt.Errorf("%s%s %s %q: %w", errPrefix, op, o.kind, o.name, inner{err})
}

// foreign reports that op on the lock o describes found foreign data at
// h's keys; it wraps cause (ErrNotHeld, or Redis's error).
func (o *options) foreign(op string, h holder, cause error) error {
	return o.wrapped(op, fmt.Errorf("%s holds data that is not this lock's: %w", h.where(), inner{cause}))
}

// errPrefix begins the message of every error of the package, once: where
// one error of the package wraps another (ErrNotObtained wraps
// ErrReplication, failed wraps either), the inner one is shown through
// inner, without the prefix that the outer one already has.
const errPrefix = "lock: "

// inner is err shown inside another error of the package: its message
// without a leading errPrefix. errors.Is and errors.As see err whole.
type inner struct{ err error }

func (e inner) Error() string { return strings.TrimPrefix(e.err.Error(), errPrefix) }
func (e inner) Unwrap() error { return e.err }

// keyList names the keys of a lock for foreign.
func keyList(keys ...string) string {
	if len(keys) == 1 {
		return "key " + keys[0]
	}
	return "one of the keys " + strings.Join(keys, ", ")
}
