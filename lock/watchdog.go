package lock

import (
	"context"
	"time"
)

// stopWatchdog stops the lease's watchdog, if any, and waits until it has
// stopped, so that no extension runs after Unlock returns.
func (l *Lease) stopWatchdog() {
	if l.stopWatch != nil {
		l.stopWatch()
		l.watching.Wait()
	}
}

// Renewal retries: after a failed round trip the watchdog tries again
// after retryMin, doubling up to a tenth of the interval, and never past the
// safe deadline. Each attempt waits for its reply at most an interval, and
// never past the safe deadline either.
const (
	retryMin     = 5 * time.Millisecond
	requestFloor = 10 * time.Millisecond
)

// watch extends the lease every third of its TTL until ctx ends or the lease
// ends. A failed round trip (a lost reply, a timeout, a broken connection)
// is retried promptly with backoff, so a blip or two costs nothing; only
// when none succeeds before the safe deadline does the expiry timer report
// the lease lost. A refusal from Redis (the token is gone) ends it at once.
func (l *Lease) watch(ctx context.Context) {
	l.mu.Lock()
	interval := max(l.ttl/3, time.Millisecond)
	l.mu.Unlock()
	t := time.NewTimer(interval)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.ended() {
			return
		}
		switch l.renew(ctx, interval) {
		case renewed:
			backoff = 0
			t.Reset(interval)
		case refused:
			l.end(ErrLost)
			return
		case capped:
			return // let the lease run out at its safe deadline
		case failed:
			backoff = min(max(2*backoff, retryMin), max(interval/10, retryMin))
			t.Reset(backoff)
		}
	}
}

// The outcomes of one renewal.
type renewal int

const (
	renewed renewal = iota
	refused         // Redis says the token is gone
	failed          // no answer: try again
	capped          // WithMaxHold reached: stop renewing
)

// renew extends the lease once, by its TTL or what WithMaxHold leaves.
func (l *Lease) renew(ctx context.Context, interval time.Duration) renewal {
	l.mu.Lock()
	ttl, safe := l.ttl, time.Until(l.safeUntil)
	l.mu.Unlock()
	if l.maxHold > 0 {
		left := l.maxHold - time.Since(l.acquired)
		if left < time.Millisecond {
			return capped
		}
		ttl = min(ttl, left)
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, max(min(interval, safe), requestFloor))
	ok, err := l.h.extend(rctx, l.token, ttl)
	cancel()
	switch {
	case foreign(err):
		return refused // overwritten by another program: not ours any more
	case err != nil:
		return failed
	case !ok:
		return refused
	}
	l.confirm(sent, ttl)
	return renewed
}
