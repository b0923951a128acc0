// Package hold keeps one lease's life on its holder's monotonic clock: how
// long the lease is safe to trust, the channel that closes when it ends,
// why it ended, and the watchdog that renews it. The lease types of lock
// and lock/memcache share it, so both stores end, confirm and renew a
// lease the same way; each supplies only the round trip that extends it.
package hold

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Config describes a freshly granted lease.
type Config struct {
	Sent       time.Time     // when the acquiring request was sent
	TTL        time.Duration // the lease's TTL in the store
	MaxHold    time.Duration // cap on auto-extension, counted from Sent; 0: none
	AutoExtend bool          // start a watchdog
	Lost       error         // the cause once the lease is lost
	Extend     Extender      // the store's extension, for the watchdog

	// OnLost and OnExtended, if set, are told when the lease is lost and
	// when an extension is confirmed (the lock's observer). They run with
	// the clock's lock held: they must not call the Clock.
	OnLost, OnExtended func()
}

// errNotStarted ends a Clock that was never started.
var errNotStarted = errors.New("hold: lease never started")

// An Extender extends the lease in its store to ttl, once.
type Extender func(ctx context.Context, ttl time.Duration) Outcome

// The Outcome of one extension.
type Outcome int

const (
	Renewed Outcome = iota
	Refused         // the store says the lease is not ours any more
	Failed          // no answer (timeout, broken connection): try again
)

// A Clock is the local life of one lease. The zero value is not usable:
// call Start once, before sharing it.
type Clock struct {
	acquired time.Time
	maxHold  time.Duration
	lost     error
	extend   Extender
	onLost   func()
	onExtend func()

	autoExtend bool // set by Start, then read-only

	mu        sync.Mutex
	ttl       time.Duration
	safeUntil time.Time
	err       error         // why the lease ended; nil while held
	done      chan struct{} // made by the first Done call
	expiry    *time.Timer   // closes done at safeUntil; started with done

	// The watchdog (see watchdog.go), if autoExtend.
	run     *watchRun // the latest one started; it may have stopped
	paused  int       // PauseWatchdog calls not yet resumed
	stopped bool      // StopWatchdog was called: it never starts again
}

// Start starts the clock of a lease acquired by a request sent at c.Sent:
// from the holder's point of view the lease is safe only until
// Sent+TTL-Drift(TTL), whatever the store said, because the reply may have
// been slow.
func (k *Clock) Start(c Config) {
	k.acquired, k.maxHold, k.lost, k.extend = c.Sent, c.MaxHold, c.Lost, c.Extend
	k.onLost, k.onExtend = c.OnLost, c.OnExtended
	k.ttl = c.TTL
	k.safeUntil = SafeUntil(c.Sent, c.TTL)
	// No timer and no channel yet: most holders never call Done, and Err
	// compares the deadline with the clock itself.
	if c.AutoExtend {
		k.autoExtend = true
		k.startWatchdog()
	}
}

// Drift is the margin kept between a lease's TTL in the store and the local
// deadline at which the holder stops trusting it: 1% for clock-rate
// differences plus 2ms for timer resolution (as in the Redlock paper).
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// SafeUntil is how long a lease of ttl, acquired or extended by a request
// sent at sent, is safe for its holder.
func SafeUntil(sent time.Time, ttl time.Duration) time.Time { return sent.Add(ttl - Drift(ttl)) }

// Late reports whether a lease of ttl acquired by a request sent at sent
// is past its safe deadline already: a grant whose reply came that late is
// of no use to its caller (see lock's ask.grant).
func Late(sent time.Time, ttl time.Duration) bool { return !time.Now().Before(SafeUntil(sent, ttl)) }

// Done returns a channel closed when the lease ends: at its safe deadline,
// or by End.
func (k *Clock) Done() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done == nil {
		k.done = make(chan struct{})
		if k.expired() {
			close(k.done)
		} else {
			k.expiry = time.AfterFunc(time.Until(k.safeUntil), k.lapse)
		}
	}
	return k.done
}

// Deadline returns the lease's safe deadline as it stands: a renewal moves
// it later.
func (k *Clock) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.safeUntil
}

// Err returns nil while the lease is held, else why it ended.
func (k *Clock) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expired()
	return k.err
}

// Ended reports whether the lease has ended.
func (k *Clock) Ended() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.expired()
}

// expired reports whether the lease has ended, ending it as lost if its
// safe deadline has passed. k.mu must be held.
func (k *Clock) expired() bool {
	if k.err == nil && !time.Now().Before(k.safeUntil) {
		k.err = k.lost
		if k.err == nil {
			k.err = errNotStarted // a zero Clock: never held
		} else if k.onLost != nil {
			k.onLost()
		}
	}
	return k.err != nil
}

// lapse is the expiry timer's: it ends the lease only if its safe deadline
// has passed, since a Confirm may have moved it just as the timer fired.
func (k *Clock) lapse() {
	k.mu.Lock()
	ended := k.expired()
	k.mu.Unlock()
	if ended {
		k.End(k.lost)
	}
}

// End ends the lease with cause err, once, and closes Done if it was made.
func (k *Clock) End(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	// A lease whose safe deadline passed unobserved was lost before this
	// end (a release that finds it gone, say): record that, and tell.
	k.expired()
	if k.err == nil {
		k.err = err
		if err == k.lost && err != nil && k.onLost != nil {
			k.onLost()
		}
	}
	if k.done != nil {
		select {
		case <-k.done:
		default:
			k.expiry.Stop()
			close(k.done)
		}
	}
}

// Confirm records that the store accepted an extension to ttl requested
// at sent. It does nothing once the lease has ended: the lock may have
// been granted to another owner meanwhile.
func (k *Clock) Confirm(sent time.Time, ttl time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.expired() {
		return
	}
	k.ttl = ttl
	k.safeUntil = SafeUntil(sent, ttl)
	if k.expiry != nil {
		k.expiry.Reset(time.Until(k.safeUntil))
	}
	if k.onExtend != nil {
		k.onExtend()
	}
}
