package lock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// holder is what a lease needs from the primitive that granted it. Each
// method runs one script that compares the whole token.
type holder interface {
	extend(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// release ends the lease of token (a rollback of an acquire without a
	// reply too).
	release(ctx context.Context, token string) (bool, error)
	// pttl returns the lease's remaining time to live in Redis, or
	// ErrNotHeld.
	pttl(ctx context.Context, token string) (time.Duration, error)
	// keys names the Redis keys of the lock, for errors.
	where() string
}

// A Lease is one owner's hold on a lock, returned by a successful acquire.
// It is identified in Redis by a random token that only its owner knows, so
// only the lease itself can extend or release what it holds.
//
// A Lease is safe for concurrent use: one goroutine may acquire it and
// another release it.
type Lease struct {
	h      holder
	name   string
	token  string
	fence  int64
	fences map[string]int64 // per name, for a multi-name lease; else nil

	// clk keeps the lease's local life: safe deadline, Done, Err and the
	// watchdog (shared with lock/memcache).
	clk hold.Clock
	o   *options // the granting lock's: its observer and logger

	// unlocking is set when Unlock starts, before its release is sent: a
	// Redlock grant whose reply comes after that may have landed after the
	// release on its server, so it is undone (see Redlock.try).
	unlocking atomic.Bool
}

// newLease starts the local clock of a lease acquired by a request sent at
// sent: from the holder's point of view the lease is safe only until
// sent+ttl-drift, whatever Redis said, because the reply may have been slow.
func newLease(h holder, name, token string, fence int64, sent time.Time, o *options) *Lease {
	l := &Lease{h: h, name: name, token: token, fence: fence, o: o}
	c := hold.Config{
		Sent: sent, TTL: o.ttl, MaxHold: o.maxHold, AutoExtend: o.autoExtend,
		Lost: ErrLost,
	}
	if o.autoExtend { // no method value to allocate for a lease without a watchdog
		c.Extend = l.extendOnce
	}
	if o.observer != nil || o.logger != nil { // no closures for a lease nobody watches
		c.OnLost = func() { o.emit(context.Background(), Event{Kind: EventLost, Err: ErrLost}) }
		c.OnExtended = func() { o.emit(context.Background(), Event{Kind: EventExtended}) }
	}
	l.clk.Start(c)
	return l
}

// extendOnce is the watchdog's round trip.
func (l *Lease) extendOnce(ctx context.Context, ttl time.Duration) hold.Outcome {
	ok, err := l.h.extend(ctx, l.token, ttl)
	l.o.observe(err)
	switch {
	case foreign(err):
		return hold.Refused // overwritten by another program: not ours any more
	case err != nil:
		return hold.Failed
	case !ok:
		return hold.Refused
	}
	return hold.Renewed
}

// Token returns the random token that identifies the lease in Redis.
func (l *Lease) Token() string { return l.token }

// Fence returns the lease's fencing number. Fencing numbers of one lock
// name strictly increase with every acquisition, across all processes,
// across the reset of an idle lock's counter and across a failover (see
// the package doc for the clock assumption this rests on; a number is
// the server's clock in microseconds), so a storage system that remembers
// the highest number it has seen can reject writes from a holder whose lease
// has silently expired: the newer holder's number is larger. A lease of a
// [MultiMutex] returns the largest of its [Lease.Fences]; a lease of a
// [Redlock] returns 0 (see there).
func (l *Lease) Fence() int64 { return l.fence }

// Fences returns the fencing number of every name the lease holds: one
// entry for a lease of a [Mutex], [RWMutex] or [Semaphore], one per name
// for a lease of a [MultiMutex]. The map is a copy.
func (l *Lease) Fences() map[string]int64 {
	if l.fences == nil {
		return map[string]int64{l.name: l.fence}
	}
	m := make(map[string]int64, len(l.fences))
	for k, v := range l.fences {
		m[k] = v
	}
	return m
}

// Done returns a channel that is closed when the lease ends: when it is
// released, or when it is lost (see [Lease.Err]). Without auto-extension,
// a lease is lost when its TTL runs out.
//
// Done closes at the holder's safe deadline, slightly before the key can
// expire in Redis, so code that stops work when Done closes does not
// overlap with the next holder (barring a process pause; use fencing).
func (l *Lease) Done() <-chan struct{} { return l.clk.Done() }

// Err returns nil while the lease is held, [ErrLost] once it was lost, and
// [ErrNotHeld] once it was released.
func (l *Lease) Err() error { return l.clk.Err() }

// Unlock releases the lease and wakes waiters. It returns [ErrNotHeld] if
// the lease had expired or was taken over by another owner; the other
// owner's lock is untouched. A lease already lost ([Lease.Err] is
// [ErrLost]) returns ErrNotHeld too, after deleting its token wherever
// Redis still holds it. Unlock on a nil Lease returns ErrNotHeld. The
// watchdog, if any, has stopped when Unlock returns.
//
// Unlock returns by ctx's deadline (with a client that has
// ContextTimeoutEnabled, see the package doc); if ctx ends first, the
// release goes on in the background, so the lock is still freed once Redis
// answers. A ctx that is already done when Unlock is called does not stop
// the release: Unlock then waits for it, bounded by 3 s, so that a
// deferred Unlock after a timeout still frees the lock at once.
//
// If the connection fails after Redis released the lock but before the
// reply arrived, go-redis resends the release, which then finds nothing to
// release and Unlock reports ErrNotHeld although the lease was held to the
// end; so can a release that shared a pipeline (see "Many goroutines" in
// the package doc) with another caller's request whose failure made
// go-redis resend the batch. The lock is released either way.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return ErrNotHeld
	}
	l.unlocking.Store(true)
	l.stopWatchdog()
	// A lease that reported itself lost (Done closed, Err is ErrLost) is
	// not held, whatever Redis says: its holder was told to stop, and on
	// its clock another may hold the lock now. Its token is still deleted
	// where Redis has it (a renewal confirmed too late, a key not expired
	// yet), but Unlock says ErrNotHeld, as lock.Do's caller must learn that
	// fn's work may have overlapped another holder's.
	lost := l.Err() == ErrLost
	var ok bool
	var err error
	if ctx.Err() != nil {
		rctx, cancel := redisutil.Detached(ctx)
		ok, err = l.h.release(rctx, l.token)
		cancel()
	} else if ok, err = l.h.release(ctx, l.token); err != nil && ctx.Err() != nil {
		releaseLater(ctx, l.h, l.token)
	}
	l.end(ErrNotHeld)
	l.o.observe(err)
	switch {
	case foreign(err):
		return l.o.foreign("release", l.h, ErrNotHeld)
	case err != nil && lost:
		// Not held, and its token may be left until it expires.
		return fmt.Errorf("%w (lost before Unlock); release %s %q: %w", ErrNotHeld, l.o.kind, l.o.name, err)
	case err != nil:
		// Not failed: a done ctx must not hide the detached release's error.
		return l.o.wrapped("release", err)
	case !ok || lost:
		return ErrNotHeld
	}
	l.o.emit(ctx, Event{Kind: EventReleased})
	return nil
}

// Extend resets the lease's TTL in Redis to ttl and moves its safe deadline
// accordingly. It returns [ErrNotHeld] if the lease has ended or its key
// no longer holds its token; Extend never re-creates an expired lock.
// A ttl below a millisecond returns an error matching [ErrInvalid] and
// leaves the lease as it was. While the client's circuit is open (see
// [ErrUnavailable]) it fails at once, the lease unchanged.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: extend TTL %v is below 1ms", ErrInvalid, ttl)
	}
	if l == nil || l.ended() {
		return ErrNotHeld
	}
	sent := time.Now()
	ok, err := l.extendGuarded(ctx, ttl)
	if foreign(err) {
		l.end(ErrLost)
		return l.o.foreign("extend", l.h, ErrNotHeld)
	}
	if err != nil {
		return l.o.failed(ctx, "extend", err)
	}
	if !ok {
		l.end(ErrLost)
		return ErrNotHeld
	}
	l.confirm(sent, ttl)
	return nil
}

// extendGuarded is Extend's round trip, through the client's circuit
// breaker (as an acquire's; none for a Redlock). The watchdog's renewals
// do not ask it: a renewal's failure costs no caller a wait, and the
// circuit may be open for another server of a Cluster than the lease's.
func (l *Lease) extendGuarded(ctx context.Context, ttl time.Duration) (ok bool, err error) {
	err = l.o.guard(ctx, func() error {
		ok, err = l.h.extend(ctx, l.token, ttl)
		return err
	})
	return ok, err
}

// TTL returns how long the lease has left in Redis, or [ErrNotHeld].
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, ErrNotHeld
	}
	var d time.Duration
	err := l.o.guard(ctx, func() (err error) {
		d, err = l.h.pttl(ctx, l.token)
		return err
	})
	if foreign(err) {
		return 0, l.o.foreign("ttl", l.h, ErrNotHeld)
	}
	if err != nil && err != ErrNotHeld {
		return 0, l.o.failed(ctx, "ttl", err)
	}
	return d, err
}

func (l *Lease) ended() bool { return l.clk.Ended() }

// givenUp reports whether the lease has ended (released or lost) or its
// Unlock has started: what it holds is to be let go, not kept.
func (l *Lease) givenUp() bool { return l.unlocking.Load() || l.ended() }

// end ends the lease with cause err, once, and closes Done if it was made.
func (l *Lease) end(err error) { l.clk.End(err) }

// confirm records that Redis accepted an extension to ttl requested at sent.
func (l *Lease) confirm(sent time.Time, ttl time.Duration) { l.clk.Confirm(sent, ttl) }

// stopWatchdog stops the lease's watchdog, if any, and waits until it has
// stopped, so that no extension runs after Unlock returns.
func (l *Lease) stopWatchdog() { l.clk.StopWatchdog() }
