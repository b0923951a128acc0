package lock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// holder is what a lease needs from the primitive that granted it. Each
// method runs one script that compares the whole token.
type holder interface {
	extend(ctx context.Context, token string, ttl time.Duration) (bool, error)
	release(ctx context.Context, token string) (bool, error)
	// pttl returns the lease's remaining time to live in Redis, or
	// ErrNotHeld.
	pttl(ctx context.Context, token string) (time.Duration, error)
}

// A Lease is one owner's hold on a lock, returned by a successful acquire.
// It is identified in Redis by a random token that only its owner knows, so
// only the lease itself can extend or release what it holds.
//
// A Lease is safe for concurrent use: one goroutine may acquire it and
// another release it.
type Lease struct {
	h        holder
	name     string
	token    string
	fence    int64
	fences   map[string]int64 // per name, for a multi-name lease; else nil
	acquired time.Time        // when the acquiring request was sent (monotonic)
	maxHold  time.Duration

	mu        sync.Mutex
	ttl       time.Duration
	safeUntil time.Time
	expiry    *time.Timer // ends the lease at safeUntil
	done      chan struct{}
	err       error

	stopWatch context.CancelFunc // nil without a watchdog
	watching  sync.WaitGroup
}

// newLease starts the local clock of a lease acquired by a request sent at
// sent: from the holder's point of view the lease is safe only until
// sent+ttl-drift, whatever Redis said, because the reply may have been slow.
func newLease(h holder, name, token string, fence int64, sent time.Time, o *options) *Lease {
	l := &Lease{
		h: h, name: name, token: token, fence: fence,
		acquired: sent, maxHold: o.maxHold, ttl: o.ttl,
		done: make(chan struct{}),
	}
	l.safeUntil = sent.Add(o.ttl - drift(o.ttl))
	l.mu.Lock() // the timer may fire before AfterFunc returns
	l.expiry = time.AfterFunc(time.Until(l.safeUntil), func() { l.end(ErrLost) })
	l.mu.Unlock()
	if o.autoExtend {
		ctx, cancel := context.WithCancel(context.Background())
		l.stopWatch = cancel
		l.watching.Go(func() { l.watch(ctx) })
	}
	return l
}

// drift is the margin kept between the lease's TTL in Redis and the local
// deadline at which the holder stops trusting it: 1% for clock-rate
// differences plus 2ms for timer resolution (as in the Redlock paper).
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// Token returns the random token that identifies the lease in Redis.
func (l *Lease) Token() string { return l.token }

// Fence returns the lease's fencing number. Fencing numbers of one lock
// name strictly increase with every acquisition, across all processes and
// forever (the counter never expires), so a storage system that remembers
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
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held, [ErrLost] once it was lost, and
// [ErrNotHeld] once it was released.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Unlock releases the lease and wakes waiters. It returns [ErrNotHeld] if
// the lease had expired or was taken over by another owner; the other
// owner's lock is untouched. Unlock runs even when ctx is already
// cancelled (it uses a detached context with a short timeout), so a
// deferred Unlock works after a timeout. Unlock on a nil Lease returns
// ErrNotHeld. The watchdog, if any, has stopped when Unlock returns.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return ErrNotHeld
	}
	l.stopWatchdog()
	ctx, cancel := detached(ctx)
	defer cancel()
	ok, err := l.h.release(ctx, l.token)
	l.end(ErrNotHeld)
	if err != nil {
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	}
	if !ok {
		return ErrNotHeld
	}
	return nil
}

// Extend resets the lease's TTL in Redis to ttl and moves its safe deadline
// accordingly. It returns [ErrNotHeld] if the lease has ended or its key
// no longer holds its token; Extend never re-creates an expired lock.
// Extend panics if ttl is below a millisecond.
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		panic(fmt.Sprintf("lock: TTL %v is below 1ms", ttl))
	}
	if l == nil || l.ended() {
		return ErrNotHeld
	}
	sent := time.Now()
	ok, err := l.h.extend(ctx, l.token, ttl)
	if err != nil {
		return redisErr(ctx, "extend", l.name, err)
	}
	if !ok {
		l.end(ErrLost)
		return ErrNotHeld
	}
	l.confirm(sent, ttl)
	return nil
}

// TTL returns how long the lease has left in Redis, or [ErrNotHeld].
func (l *Lease) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, ErrNotHeld
	}
	d, err := l.h.pttl(ctx, l.token)
	if err != nil && err != ErrNotHeld {
		return 0, redisErr(ctx, "ttl", l.name, err)
	}
	return d, err
}

func (l *Lease) ended() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// end closes Done with cause err, once.
func (l *Lease) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	l.expiry.Stop()
	close(l.done)
}

// confirm records that Redis accepted an extension to ttl requested at sent.
func (l *Lease) confirm(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.ttl = ttl
	l.safeUntil = sent.Add(ttl - drift(ttl))
	l.expiry.Reset(time.Until(l.safeUntil))
}

func (l *Lease) stopWatchdog() {
	if l.stopWatch != nil {
		l.stopWatch()
		l.watching.Wait()
	}
}

// watch extends the lease every third of its TTL until ctx ends or the lease
// ends. A failed round trip is retried at the next tick; if none succeeds
// before the safe deadline, the expiry timer reports the lease lost.
func (l *Lease) watch(ctx context.Context) {
	l.mu.Lock()
	interval := l.ttl / 3
	l.mu.Unlock()
	t := time.NewTicker(max(interval, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-t.C:
		}
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		if l.maxHold > 0 {
			left := l.maxHold - time.Since(l.acquired)
			if left < time.Millisecond {
				return // let the lease run out at its safe deadline
			}
			ttl = min(ttl, left)
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, max(interval, 10*time.Millisecond))
		ok, err := l.h.extend(rctx, l.token, ttl)
		cancel()
		switch {
		case err != nil:
			continue
		case !ok:
			l.end(ErrLost)
			return
		}
		l.confirm(sent, ttl)
	}
}
