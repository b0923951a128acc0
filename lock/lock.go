package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
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
	return keyspace(redisutil.Key("dogpile:"+kind+":", name))
}

func (k keyspace) key(suffix string) string { return string(k) + ":" + suffix }

// names returns k's own name, then key(suffix) for each suffix, all cut
// from one string: users make a lock per call, so a lock's names should
// cost it one allocation, not one each.
func (k keyspace) names(suffixes ...string) []string {
	n := len(k)
	for _, s := range suffixes {
		n += len(k) + 1 + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(string(k))
	for _, s := range suffixes {
		b.WriteString(string(k))
		b.WriteByte(':')
		b.WriteString(s)
	}
	all := b.String()
	out := make([]string, 0, 1+len(suffixes))
	out = append(out, all[:len(k)])
	at := len(k)
	for _, s := range suffixes {
		end := at + len(k) + 1 + len(s)
		out = append(out, all[at:end])
		at = end
	}
	return out
}

// attempt tries to acquire once. It returns a lease on success; otherwise
// retry is how long the current holder may keep the lock (its PTTL), the
// longest it is worth waiting before looking again.
type attempt func(ctx context.Context) (l *Lease, retry time.Duration, err error)

// retryAfter turns a holder's PTTL reply into a wait: 0 means the key is
// expiring this very millisecond, -1 a key without TTL (not one of ours).
func retryAfter(pttl int64, o *options) time.Duration {
	return redisutil.Wait(pttl, o.maxBackoff)
}

// An ask is one acquire request by token on behalf of holder h: what
// grant needs to turn the script's reply into an attempt's result.
type ask struct {
	h     holder
	name  string
	token string
	sent  time.Time // when the request was sent
	o     *options
	// renew: a waiter that holds a place it must renew (a ticket, a claim)
	// comes back within a third of the TTL, with the same token. A single
	// attempt (TryLock, TryAcquire) comes back with none: what it was
	// granted too late is undone (see grant).
	renew bool
}

// A reply is an acquire script's answer: granted with fence v, or not
// granted with the holder's PTTL v; or err.
type reply struct {
	granted bool
	v       int64
	err     error
}

// grant turns r, the reply to a, into the result of an attempt. On a Redis
// error the script may have run although no reply came back (a timeout, a
// cancelled context, a broken connection): a's holder releases its token in
// the background (see releaseLater), so a failed acquire never leaves an
// orphan lock behind for a whole TTL and never keeps its caller waiting.
func (a *ask) grant(ctx context.Context, r reply) (*Lease, time.Duration, error) {
	if foreign(r.err) {
		return nil, 0, a.o.foreign("acquire", a.h, r.err) // nothing was taken
	}
	if r.err != nil {
		if redisutil.MayHaveRun(r.err) {
			releaseAfter(ctx, a.h, a.token, r.err)
		}
		return nil, 0, a.o.failed(ctx, "acquire", r.err)
	}
	if !r.granted {
		retry := retryAfter(r.v, a.o)
		if a.renew {
			retry = min(retry, a.o.ttl/3)
		}
		return nil, retry, nil
	}
	if hold.Late(a.sent, a.o.ttl) {
		// Granted, but the reply came after the lease's safe deadline (it
		// was slower than the TTL): the caller would enter its section
		// with a lease already lost. Try again: a semaphore's next attempt
		// (same token) renews its permits if they are still held; a
		// mutex's (a new token) finds the lock free once this one is
		// undone, in the background.
		if !a.renew {
			releaseLater(ctx, a.h, a.token)
		}
		return nil, time.Millisecond, nil
	}
	return newLease(a.h, a.name, a.token, r.v, a.sent, a.o), 0, nil
}

// pair reads the {granted, value} reply of an acquire script.
func pair(res []int64, err error) reply {
	if err != nil || len(res) < 2 {
		return reply{err: err}
	}
	return reply{granted: res[0] == 1, v: res[1]}
}

// acquire runs try until it succeeds or ctx ends, waiting between attempts
// as every waiter does (see wake.Waiter): the first attempt runs before
// subscribing, so an uncontended acquire is one round trip, and any later
// release publishes a message on the lock's channel. An empty channel
// means no push wake-ups (Redlock spans servers): the waiter polls with
// jittered backoff.
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
	w := wake.NewWaiter(c, o.minBackoff, o.maxBackoff)
	defer w.Close()
	// When goroutines of this process already wait for this lock, a new
	// caller queues behind them instead of trying at once: a holder that
	// unlocks and locks again would otherwise reach Redis before the waiter
	// its release just woke, and take the lock back every time. The release
	// wakes this process's waiters one at a time, longest first; the turn's
	// wait is bounded in case the wake-up is lost.
	if ch := channel(); ch != "" && wake.Waiting(c, ch) > 0 {
		if w.Watch(ctx, ch); w.Subscribed() {
			if _, err := w.Wait(ctx, o.maxBackoff); err != nil {
				return nil, err
			}
		}
	}
	for {
		l, retry, err := guarded(ctx, o, try)
		if l != nil || err != nil {
			return l, err
		}
		if w.Watch(ctx, channel()) {
			continue // (re)subscribed: a release may have come before
		}
		if _, err := w.Wait(ctx, retry); err != nil {
			return nil, err
		}
	}
}
