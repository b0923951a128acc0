package lock

import (
	"context"
	"errors"
	"fmt"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/wake"
	"github.com/redis/go-redis/v9"
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

// checkName returns an error matching [ErrInvalid] for an empty name. The
// constructors keep it and every call of the lock returns it, so a name
// taken from a request fails that request, not the process.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty lock name", ErrInvalid)
	}
	return nil
}

// keyspace derives the Redis names of a lock. Every key and channel of one
// lock shares the hash tag "{...}", so it lands in one cluster slot and one
// script may touch them all.
type keyspace string

func newKeyspace(kind, name string) keyspace {
	return keyspace("dogpile:" + kind + ":" + redisutil.Tag(name))
}

func (k keyspace) key(suffix string) string { return string(k) + ":" + suffix }

// attempt tries to acquire once. It returns a lease on success; otherwise
// retry is how long the current holder may keep the lock (its PTTL), the
// longest it is worth waiting before looking again.
type attempt func(ctx context.Context) (l *Lease, retry time.Duration, err error)

// retryAfter turns a holder's PTTL reply into a wait: 0 means the key is
// expiring this very millisecond, -1 a key without TTL (not one of ours).
func retryAfter(pttl int64, o *options) time.Duration {
	return redisutil.Wait(pttl, o.maxBackoff)
}

// grant turns the reply of an acquire script, granted with fence v or not
// with the holder's PTTL v, into the result of an attempt by token on
// behalf of holder h. On a Redis error
// the script may have run although no reply came back (a timeout, a
// cancelled context, a broken connection): h releases token in the
// background (see rollback), so a failed acquire never leaves an orphan
// lock behind for a whole TTL and never keeps its caller waiting. A waiter that holds a place it must renew (a ticket, a claim)
// comes back within a third of the TTL.
func grant(ctx context.Context, h holder, op, name, token string, sent time.Time, granted bool, v int64, err error, o *options, renew bool) (*Lease, time.Duration, error) {
	if foreign(err) {
		return nil, 0, foreignErr(op, name, h, err) // nothing was taken
	}
	if err != nil {
		if !redisutil.NeverSent(err) && !errors.Is(err, errNotSent) {
			releaseLater(ctx, h, token)
		}
		return nil, 0, redisErr(ctx, op, name, err)
	}
	if !granted {
		retry := retryAfter(v, o)
		if renew {
			retry = min(retry, o.ttl/3)
		}
		return nil, retry, nil
	}
	return newLease(h, name, token, v, sent, o), 0, nil
}

// pair reads the {granted, value} reply of an acquire script.
func pair(res []int64) (granted bool, v int64) {
	if len(res) < 2 {
		return false, 0
	}
	return res[0] == 1, res[1]
}

// pushWaitCap bounds a wait for a push wake-up, so that a lost message and a
// holder with a long TTL (or a watchdog) cost at most this much latency.
const pushWaitCap = 2 * time.Second

// acquire runs try until it succeeds or ctx ends. The first attempt runs
// before subscribing, so an uncontended acquire is one round trip. After
// that the waiter subscribes to the lock's wake-up channel and tries again:
// a release that happened between the first attempt and the subscription
// is caught by that second attempt, and any later release publishes a
// message. Each wait is bounded by the holder's remaining TTL, because
// pub/sub messages can be lost. An empty channel means no push wake-ups
// (Redlock spans servers): the waiter polls with jittered backoff.
func acquire(ctx context.Context, c redis.UniversalClient, channel string, o *options, try attempt) (*Lease, error) {
	return acquireOn(ctx, c, func() string { return channel }, o, try)
}

// acquireOn is acquire for a waiter whose wake-up channel may change
// between attempts (a multi-name lock waits on whichever name was busy).
// channel is called after each failed attempt; when it names another
// channel, the waiter moves its subscription and tries once more before
// waiting, for the same reason as the second attempt above.
func acquireOn(ctx context.Context, c redis.UniversalClient, channel func() string, o *options, try attempt) (*Lease, error) {
	if o.waitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.waitTimeout)
		defer cancel()
	}
	start := time.Now()
	l, err := wait(ctx, c, channel, o, try)
	if cerr := ctx.Err(); err != nil && cerr != nil && errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", ErrNotObtained, cerr)
	}
	o.acquired(ctx, start, l, err)
	return l, err
}

// wait is the loop of acquireOn. Each attempt goes through the client's
// circuit breaker (guarded).
func wait(ctx context.Context, c redis.UniversalClient, channel func() string, o *options, try attempt) (*Lease, error) {
	// When goroutines of this process already wait for this lock, a new
	// caller queues behind them instead of trying at once: a holder that
	// unlocks and locks again would otherwise reach Redis before the waiter
	// its release just woke, and take the lock back every time. The release
	// wakes this process's waiters one at a time, longest first.
	queued := false
	if ch := channel(); ch != "" && wake.Waiting(c, ch) > 0 {
		queued = true
	} else if l, _, err := guarded(ctx, c, o, try); l != nil || err != nil {
		return l, err
	}
	var sub *wake.Sub // nil: fall back to polling
	subscribed := ""
	defer func() { sub.Close() }()
	backoff := hold.NewBackoff(o.minBackoff, o.maxBackoff)
	t := time.NewTimer(time.Hour) // Reset below; since Go 1.23 Reset drops a stale tick
	defer t.Stop()
	for {
		if ch := channel(); ch != subscribed && ch != "" {
			sub.Close()
			sub, _ = wake.Subscribe(ctx, c, ch)
			subscribed = ch
			continue
		}
		var retry time.Duration
		if queued && sub != nil {
			// Wait for our turn, bounded in case the wake-up is lost.
			queued = false
			retry = o.maxBackoff
		} else {
			var l *Lease
			var err error
			if l, retry, err = guarded(ctx, c, o, try); l != nil || err != nil {
				return l, err
			}
			if ch := channel(); ch != subscribed && ch != "" {
				continue // busy on another name now: move there first
			}
		}
		var d time.Duration
		if sub != nil {
			// Small jitter so that waiters of several processes woken by
			// the same expiry do not all hit Redis in the same microsecond.
			d = min(retry, pushWaitCap) + rand.N(time.Millisecond)
		} else {
			d = min(retry, backoff.Next())
		}
		t.Reset(d)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-sub.Wake():
		case <-t.C:
		}
	}
}

// redisErr reports a failed round trip. A done context wins, unwrapped, so
// callers can compare it with ==, as with the standard library.
func redisErr(ctx context.Context, op, name string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("lock: %s %q: %w", op, name, err)
}

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

// foreignErr reports that op on the lock called name found foreign data
// at h's keys; it wraps cause (ErrNotHeld, or Redis's error).
func foreignErr(op, name string, h holder, cause error) error {
	return fmt.Errorf("lock: %s %q: %s holds data that is not this lock's: %w", op, name, h.where(), cause)
}

// keyList names the keys of a lock for foreignErr.
func keyList(keys ...string) string {
	if len(keys) == 1 {
		return "key " + keys[0]
	}
	return "one of the keys " + strings.Join(keys, ", ")
}

// detached returns a context for cleanup work (release, rollback) that must
// run even when the caller's context is already cancelled.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
}
