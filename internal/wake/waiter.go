package wake

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// The wait policy of every waiter, the cache's miss path and each lock
// primitive alike: try; on finding the thing busy, subscribe to its
// channel and try again at once (a release between the try and the
// subscription would otherwise go unnoticed); then wait for a wake-up, at
// most the holder's remaining time (its PTTL) and PushCap, plus a jitter
// below a millisecond; without a subscription (pub/sub refused, or no
// channel: Redlock, memcached), poll with Backoff's jittered backoff,
// never past the holder's remaining time. Every wait is bounded: a
// wake-up is only a hint.

// PushCap bounds one wait for a push wake-up, so that a lost message and a
// holder with a long TTL (or a lease renewed by a watchdog) cost at most
// this much latency.
const PushCap = 2 * time.Second

// A Waiter is one caller's side of the policy above. The zero value is not
// usable: make one with NewWaiter, use it from one goroutine, and Close it.
// It is a value, and allocates nothing until it first waits, so that a
// caller that never waits (an uncontended acquire) pays nothing for it.
type Waiter struct {
	client  redis.UniversalClient
	channel string // subscribed to, or being polled; "" before Watch
	sub     *Sub   // nil: polling
	backoff Backoff
	timer   *time.Timer // made by the first Wait
}

// NewWaiter returns a Waiter for c whose polls back off from min to max
// (see Backoff).
func NewWaiter(c redis.UniversalClient, min, max time.Duration) Waiter {
	return Waiter{client: c, backoff: NewBackoff(min, max)}
}

// Watch makes w wait on channel from now on, "" for polling. It reports
// whether it has just subscribed (or moved) there, in which case the
// caller must try again before it waits. A failed subscription leaves w
// polling: the failure shows in the caller's next try if ctx is done.
func (w *Waiter) Watch(ctx context.Context, channel string) (again bool) {
	if channel == w.channel {
		return false
	}
	w.sub.Close()
	w.sub, w.channel = nil, channel
	if channel == "" {
		return false
	}
	w.sub, _ = Subscribe(ctx, w.client, channel)
	return true
}

// Subscribed reports whether w waits for wake-ups (rather than polling).
func (w *Waiter) Subscribed() bool { return w.sub != nil }

// How a wait ended, when ctx did not end it.
type Woken int

const (
	Pushed Woken = iota // a message on the channel (see Payload), or connection trouble
	Polled              // the holder's remaining time or the backoff passed
)

// Wait waits for a wake-up, or for at most holder (the holder's remaining
// time; 0 or less: unknown), or until ctx ends, with the policy above.
func (w *Waiter) Wait(ctx context.Context, holder time.Duration) (Woken, error) {
	if holder <= 0 {
		holder = PushCap
	}
	var d time.Duration
	if w.sub != nil {
		// Jitter, so that the waiters of several processes woken by the
		// same expiry do not all look in the same microsecond.
		d = min(holder, PushCap) + rand.N(time.Millisecond)
	} else {
		d = min(holder, w.backoff.Next())
	}
	if w.timer == nil {
		w.timer = time.NewTimer(d)
	} else {
		w.timer.Reset(d) // since Go 1.23 Reset drops a stale tick
	}
	select {
	case <-ctx.Done():
		return Polled, ctx.Err()
	case <-w.sub.Wake():
		return Pushed, nil
	case <-w.timer.C:
		return Polled, nil
	}
}

// Payload returns the payload of the message that last woke w (see
// Sub.Payload).
func (w *Waiter) Payload() string { return w.sub.Payload() }

// Close releases w's subscription and timer.
func (w *Waiter) Close() {
	w.sub.Close()
	if w.timer != nil {
		w.timer.Stop()
	}
}
