package hold

import (
	"context"
	"time"
)

// StopWatchdog stops the watchdog, if any, and waits until it has stopped,
// so that no extension runs after the caller's release.
func (k *Clock) StopWatchdog() {
	if k.stopWatch != nil {
		k.stopWatch()
		k.watching.Wait()
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

// capped is renew's outcome once MaxHold is reached: stop renewing.
const capped Outcome = -1

// watch extends the lease every third of its TTL until ctx ends or the lease
// ends. A failed round trip (a lost reply, a timeout, a broken connection)
// is retried promptly with backoff, so a blip or two costs nothing; only
// when none succeeds before the safe deadline does the lease end as lost.
// A refusal from the store (the token is gone) ends it at once.
func (k *Clock) watch(ctx context.Context) {
	k.mu.Lock()
	interval := max(k.ttl/3, time.Millisecond)
	k.mu.Unlock()
	t := time.NewTimer(interval)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if k.Ended() {
			return
		}
		switch k.renew(ctx, interval) {
		case Renewed:
			backoff = 0
			t.Reset(interval)
		case Refused:
			k.End(k.lost)
			return
		case capped:
			return // let the lease run out at its safe deadline
		case Failed:
			backoff = min(max(2*backoff, retryMin), max(interval/10, retryMin))
			t.Reset(backoff)
		}
	}
}

// renew extends the lease once, by its TTL or what MaxHold leaves.
func (k *Clock) renew(ctx context.Context, interval time.Duration) Outcome {
	k.mu.Lock()
	ttl, safe := k.ttl, time.Until(k.safeUntil)
	k.mu.Unlock()
	if k.maxHold > 0 {
		left := k.maxHold - time.Since(k.acquired)
		if left < time.Millisecond {
			return capped
		}
		ttl = min(ttl, left)
	}
	sent := time.Now()
	rctx, cancel := context.WithTimeout(ctx, max(min(interval, safe), requestFloor))
	out := k.extend(rctx, ttl)
	cancel()
	if out == Renewed {
		k.Confirm(sent, ttl)
	}
	return out
}
