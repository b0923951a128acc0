package hold

import (
	"context"
	"time"
)

// A watchRun is one run of the watchdog: its goroutine starts from an
// alarm when the first renewal is due (see alarms), cancel stops it, done
// closes when it has stopped, or once the alarm is cancelled before it.
//
// The goroutine waits for the alarm, not the other way round: most leases
// end long before their first renewal (a cache's compute, a short critical
// section), and a goroutine started at the grant would cost each of them a
// thread's wake-up on the path from the lock's reply to the caller's work.
type watchRun struct {
	start  alarm
	cancel context.CancelFunc
	done   chan struct{}
}

// startWatchdog starts a run of the watchdog. k.mu must be held, or k not
// yet shared.
func (k *Clock) startWatchdog() {
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchRun{cancel: cancel, done: make(chan struct{})}
	k.run = r
	interval := max(k.ttl/3, time.Millisecond)
	// Due an interval after the last renewal (or the grant): a run resumed
	// after a pause, or started for a grant whose reply was slow, does not
	// wait a whole interval more.
	// The last request confirmed was sent TTL-Drift before safeUntil.
	r.start = alarm{due: k.safeUntil.Add(interval - k.ttl + Drift(k.ttl)), f: func() { k.watch(ctx, r.done, interval) }}
	schedule.add(&r.start)
}

// StopWatchdog stops the watchdog, if any, for good, and waits until it
// has stopped, so that no extension runs after the caller's release.
func (k *Clock) StopWatchdog() {
	if k.autoExtend {
		k.halt(func() { k.stopped = true })
	}
}

// PauseWatchdog stops the watchdog, if any, until ResumeWatchdog, and waits
// until it has stopped: for a request that changes what the lease is in
// the store (an upgrade), with which a renewal must not race, since it
// would find the old lease gone and end it as lost.
func (k *Clock) PauseWatchdog() {
	if k.autoExtend {
		k.halt(func() { k.paused++ })
	}
}

// ResumeWatchdog undoes one PauseWatchdog: the watchdog runs again, unless
// the lease has ended, StopWatchdog was called, or another pause is still
// on. Its first renewal is due an interval after the last one, not after
// the pause.
func (k *Clock) ResumeWatchdog() {
	if !k.autoExtend {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.paused == 0 {
		return // not paused: a run is already on
	}
	k.paused--
	if k.paused == 0 && !k.stopped && !k.expired() {
		k.startWatchdog()
	}
}

// halt records why the watchdog stops (mark runs with k.mu held), stops the
// run on, and waits for it. A run whose goroutine never started is over
// once its alarm is cancelled; the halt that cancels it closes its done.
func (k *Clock) halt(mark func()) {
	k.mu.Lock()
	mark()
	r := k.run
	k.mu.Unlock()
	r.cancel()
	if schedule.cancel(&r.start) {
		close(r.done)
	}
	<-r.done
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

// watch extends the lease every interval (a third of its TTL), counted
// from when each renewal was sent, until ctx ends or the lease ends; it
// runs from the run's alarm, when the first renewal is due. A failed round trip (a lost reply, a timeout, a broken
// connection) is retried promptly with backoff, so a blip or two costs
// nothing; only when none succeeds before the safe deadline does the lease
// end as lost. A refusal from the store (the token is gone) ends it at
// once.
func (k *Clock) watch(ctx context.Context, done chan<- struct{}, interval time.Duration) {
	defer close(done)
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	backoff := time.Duration(0)
	for {
		if ctx.Err() != nil || k.Ended() {
			return
		}
		sent := time.Now()
		next := interval
		switch k.renew(ctx, interval) {
		case Renewed:
			backoff = 0
			// Due an interval after this renewal was sent, as the lease's
			// deadline counts from then, not after it returned: a renewal
			// confirmed late in its interval (a slow server, a Redlock
			// majority that answered late) would otherwise put the next
			// one's confirmation a whole interval later, on the safe
			// deadline when it too is slow.
			next = max(interval-time.Since(sent), retryMin)
		case Refused:
			k.End(k.lost)
			return
		case capped:
			return // let the lease run out at its safe deadline
		case Failed:
			backoff = min(max(2*backoff, retryMin), max(interval/10, retryMin))
			next = backoff
		}
		if t == nil {
			t = time.NewTimer(next)
		} else {
			t.Reset(next)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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
