package memcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
	"github.com/dogpile-go/dogpile/lock"
)

var (
	// ErrNotHeld is lock's [lock.ErrNotHeld], the same value: Unlock and
	// Extend return it when the lease has expired, was released, or the
	// key holds another owner's token. Nothing in memcached was changed.
	ErrNotHeld = lock.ErrNotHeld

	// ErrNotObtained is lock's [lock.ErrNotObtained], the same value: Lock
	// gave up because its context ended or its wait timeout passed. The
	// error also matches the context's error.
	ErrNotObtained = lock.ErrNotObtained

	// ErrLost is lock's [lock.ErrLost], the same value: the cause
	// [Lease.Err] reports once a lease was lost.
	ErrLost = lock.ErrLost

	// ErrInvalid is lock's [lock.ErrInvalid], the same value: errors for
	// bad input match it (an empty name, a TTL below 1 s or above 30 days less 2 s,
	// a bad backoff or wait timeout) and name the argument.
	ErrInvalid = lock.ErrInvalid
)

// A Mutex names a mutual exclusion lock in memcached, shared by every
// process that uses the same name and servers. It holds no state of its
// own: it is safe for concurrent use. Create one with [NewMutex].
type Mutex struct {
	client *gomemcache.Client
	name   string
	key    string
	exp    int32 // the lease TTL as memcached's expiry (see expiry)
	opts   options
	err    error // bad input, returned by every call
}

// NewMutex returns the mutex called name in client's memcached. It does no
// I/O. An empty name (names may come from data) is reported, matching
// [ErrInvalid], by every call on the mutex. NewMutex panics if client is
// nil (a programmer error).
func NewMutex(client *gomemcache.Client, name string, opts ...Option) *Mutex {
	if client == nil {
		panic("lock/memcache: nil memcache client (a programmer error)")
	}
	m := &Mutex{client: client, name: name, key: keyFor(name), opts: buildOptions(opts)}
	m.exp = expiry(m.opts.ttl)
	if name == "" {
		m.err = fmt.Errorf("%w: empty lock name", ErrInvalid)
	}
	return m
}

// Lock blocks until it acquires the mutex or ctx is done (or the wait
// timeout passes, see [WithWaitTimeout]). Memcached cannot notify anyone,
// so a waiter polls with jittered exponential backoff (see [WithBackoff]).
// On failure Lock returns an error matching [ErrNotObtained] and
// ctx.Err(), or memcached's error, and holds nothing.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if m.err != nil {
		return nil, m.err
	}
	if m.opts.waitTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.opts.waitTimeout)
		defer cancel()
	}
	w := wake.NewWaiter(nil, m.opts.minBackoff, m.opts.maxBackoff) // no channel: it polls
	defer w.Close()
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
		}
		if l, err := m.try(); l != nil || err != nil {
			return l, err
		}
		_, _ = w.Wait(ctx, 0) // memcached tells no remaining time; ctx is checked above
	}
}

// TryLock makes one attempt to acquire the mutex, one round trip. It
// reports false, with a nil error, if another owner holds it.
func (m *Mutex) TryLock(ctx context.Context) (*Lease, bool, error) {
	if m.err != nil {
		return nil, false, m.err
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	l, err := m.try()
	return l, l != nil, err
}

// Locked reports whether anyone holds the mutex. It is a snapshot: the
// lock may change hands at once.
func (m *Mutex) Locked(ctx context.Context) (bool, error) {
	if m.err != nil {
		return false, m.err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	_, err := m.client.Get(m.key)
	if errors.Is(err, gomemcache.ErrCacheMiss) {
		return false, nil
	}
	if err != nil {
		return false, m.fail("locked", err)
	}
	return true, nil
}

// try adds the key with a fresh token: memcached's add stores only if the
// key is absent, atomically, so at most one owner's add succeeds.
func (m *Mutex) try() (*Lease, error) {
	token := redisutil.Token()
	sent := time.Now()
	err := m.client.Add(&gomemcache.Item{Key: m.key, Value: []byte(token), Expiration: m.exp})
	switch {
	case err == nil && hold.Late(sent, m.opts.ttl):
		// Stored, but the reply came after the lease's safe deadline (a
		// network slower than the TTL): the caller would enter with a lease
		// already lost. Take it back and try again.
		_, _ = m.release(token)
		return nil, nil
	case err == nil:
		return newLease(m, token, sent), nil
	case errors.Is(err, gomemcache.ErrNotStored):
		return nil, nil // busy
	case redisutil.MayHaveRun(err) && !connectFailed(err):
		// The add may have been stored with its reply lost: take it back
		// now, best effort, rather than leave the lock held for a TTL.
		_, _ = m.release(token)
	}
	return nil, m.fail("acquire", err)
}

// connectFailed reports whether err is gomemcache failing to connect, so
// that nothing was sent.
func connectFailed(err error) bool {
	var cte *gomemcache.ConnectTimeoutError
	return errors.As(err, &cte)
}

func (m *Mutex) fail(op string, err error) error {
	return fmt.Errorf("lock/memcache: %s %q: %w", op, m.name, err)
}
