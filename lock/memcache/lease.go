package memcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/dogpile-go/dogpile/internal/hold"
)

// A Lease is one owner's hold on a [Mutex], returned by a successful
// acquire. It is identified in memcached by a random token that only its
// owner knows, so only the lease itself can extend or release what it
// holds. A Lease is safe for concurrent use.
type Lease struct {
	m     *Mutex
	token string
	clk   hold.Clock // safe deadline, Done, Err, watchdog: shared with lock
}

func newLease(m *Mutex, token string, sent time.Time) *Lease {
	l := &Lease{m: m, token: token}
	l.clk.Start(hold.Config{
		Sent: sent, TTL: m.opts.ttl, AutoExtend: m.opts.autoExtend,
		Lost: ErrLost, Extend: l.extendOnce,
	})
	return l
}

// Token returns the random token that identifies the lease in memcached.
func (l *Lease) Token() string { return l.token }

// Done returns a channel that is closed when the lease ends: when it is
// released, or when it is lost (see [Lease.Err]). It closes at the
// holder's safe deadline, slightly before the key can expire in memcached,
// so code that stops work when Done closes does not overlap with the next
// holder, barring a process pause (there is no fencing; see the package
// doc).
func (l *Lease) Done() <-chan struct{} { return l.clk.Done() }

// Err returns nil while the lease is held, [ErrLost] once it was lost, and
// [ErrNotHeld] once it was released.
func (l *Lease) Err() error { return l.clk.Err() }

// Unlock releases the lease. It returns [ErrNotHeld] if the lease had
// expired or the key holds another owner's token, which is left untouched.
// A lease already lost ([Lease.Err] is [ErrLost]) returns ErrNotHeld too,
// after deleting its token if memcached still holds it. Unlock on a nil
// Lease returns ErrNotHeld. The watchdog, if any, has stopped when Unlock
// returns.
//
// A done ctx does not stop the release, so a deferred Unlock after a
// timeout still frees the lock at once: gomemcache takes no context, and
// each of the release's two round trips is bounded by the client's Timeout
// instead.
func (l *Lease) Unlock(ctx context.Context) error {
	if l == nil {
		return ErrNotHeld
	}
	l.clk.StopWatchdog()
	// A lease that told its holder it was lost is not held, whatever
	// memcached says (as lock's Lease.Unlock): lock.Do's caller must learn
	// that fn's work may have overlapped another holder's.
	lost := l.Err() == ErrLost
	ok, err := l.m.release(l.token)
	l.clk.End(ErrNotHeld)
	switch {
	case err != nil && lost: // not held, and its token may be left until it expires
		return fmt.Errorf("%w (lost before Unlock); %w", ErrNotHeld, l.m.fail("release", err))
	case err != nil:
		return l.m.fail("release", err)
	case !ok || lost:
		return ErrNotHeld
	}
	return nil
}

// Extend resets the lease's TTL in memcached to ttl (whole seconds, see
// the package doc) and moves its safe deadline accordingly. It returns
// [ErrNotHeld] if the lease has ended or its key no longer holds its token;
// Extend never re-creates an expired lock. A ttl below 1 s or above 30
// days less 2 s returns an error matching [ErrInvalid].
func (l *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if l == nil || l.clk.Ended() {
		return ErrNotHeld
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sent := time.Now()
	ok, err := l.m.extend(l.token, ttl)
	if err != nil {
		return l.m.fail("extend", err)
	}
	if !ok {
		l.clk.End(ErrLost)
		return ErrNotHeld
	}
	l.clk.Confirm(sent, ttl)
	return nil
}

// extendOnce is the watchdog's round trip.
func (l *Lease) extendOnce(_ context.Context, ttl time.Duration) hold.Outcome {
	ok, err := l.m.extend(l.token, ttl)
	switch {
	case err != nil:
		return hold.Failed
	case !ok:
		return hold.Refused
	}
	return hold.Renewed
}

// casAttempts bounds how often a token check is retried when the item
// changed between gets and cas although it still holds our token (our own
// watchdog extended it meanwhile).
const casAttempts = 3

func (m *Mutex) release(token string) (bool, error) { return m.swap(token, expireNow) }

func (m *Mutex) extend(token string, ttl time.Duration) (bool, error) {
	return m.swap(token, expiry(ttl))
}

// swap sets the expiry of the key to exp if it holds token: gets reads the
// value with its CAS id, and cas writes only if nobody wrote since. It
// reports false if the key is gone or holds another token.
func (m *Mutex) swap(token string, exp int32) (bool, error) {
	for range casAttempts {
		it, err := m.client.Get(m.key) // gomemcache's Get is "gets"
		if errors.Is(err, gomemcache.ErrCacheMiss) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if string(it.Value) != token {
			return false, nil
		}
		it.Expiration = exp
		err = m.client.CompareAndSwap(it)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, gomemcache.ErrCASConflict):
			continue // written since: look again
		case errors.Is(err, gomemcache.ErrNotStored), errors.Is(err, gomemcache.ErrCacheMiss):
			return false, nil // expired or evicted since
		default:
			return false, err
		}
	}
	return false, nil
}
