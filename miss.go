package dogpile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// The cross-process miss: one process looks for one key's value across the
// fleet, through script.Fetch (GET-or-lock), until it has the value, holds
// the compute lock, or fails. It never computes itself: it reports that the
// caller holds the lock, so that Fetch, Refresh and background refreshes
// share it and do their own computing.

// A missEnd says how a miss ended without an error.
type missEnd int

const (
	missValue missEnd = iota // a value was found or pushed: the bytes are returned
	missHeld                 // this process holds the compute lock and must compute
	missDown                 // Redis is unreachable and WithComputeWhenDown is set
)

// A miss is the state of one process's miss for one key.
type miss[T any] struct {
	c *core[T]
	j *job[T] // the key, its names, and how the miss starts; the lock's reply sets its prev

	token string    // ours: the lock holds it once we win
	first []any     // a reply to start from, not yet handled: Fetch's first look's, or FetchMany's script.FetchMany's
	look  bool      // the next try is Fetch's first look (see lookWithScript)
	sent  time.Time // when the request that won the lock was sent
	seen  string    // the holder we wait for, or ""
	bad   string    // SHA1 of a value to pass over (bytes that did not decode; a Refresh's old value), or ""
	force string    // "force": pass over a value (Refresh), or ""

	// Subscribe only once the fetch script says another process computes:
	// the winner, whose compute the whole fleet waits for, must not spend a
	// round trip on a subscription first. A waiter then runs the script once
	// more after subscribing (a value stored in between would otherwise be
	// missed), so it costs three commands (GET, script, script; the value
	// comes with the wake-up, see storedBy). The wait policy is every
	// waiter's (see wake.Waiter).
	w wake.Waiter

	// The wait for another process's compute, for its events.
	waited    bool
	waitStart time.Time
	waitCtx   context.Context // the observer's, from EventWaitStart
	lastWake  Wake            // push or poll
}

// newMiss starts j's miss, from j's first reply if it has one: bytes of
// SHA1 j.bad, which did not decode, are passed over, and so is any value
// (j.force, Refresh's) until another holder was awaited.
func (c *core[T]) newMiss(j *job[T]) *miss[T] {
	f := ""
	if j.force {
		f = "force"
	}
	return &miss[T]{force: f,
		c: c, j: j, bad: j.bad, first: j.first,
		token: redisutil.Token(),
		w:     wake.NewWaiter(c.client, pollMin, pollMax),
	}
}

// Bounds of the backoff between polls of a miss without a subscription:
// short, since the value a fleet waits for may come at any moment, and
// never past the holder's lease.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 200 * time.Millisecond
)

// close releases the miss's subscription and timer.
func (m *miss[T]) close() { m.w.Close() }

// abandon closes a miss that will not run (the Cache was closed before
// its flight started), releasing the lock that its first reply says it
// took: no process is to wait a lease for a compute that will not come.
func (m *miss[T]) abandon(ctx context.Context) {
	if kind, _ := script.At[int64](m.first, 0); kind == script.Locked {
		m.c.rollback(ctx, releaseCall(m.j.ks, m.token, m.c.publish))
	}
	m.close()
}

// restart makes m look again as a newcomer, after the lock it won was lost.
func (m *miss[T]) restart() {
	m.token, m.seen, m.bad = redisutil.Token(), "", ""
	m.w.Watch(context.Background(), "") // a newcomer subscribes once it finds a holder
}

// waitEnd reports how the wait that resolve ended with end (and err)
// ended: a value after a push or a poll, the lock taken over, the holder's
// compute failed, the wait timed out, or Redis failed; notFound, that the
// answer is "not found" (an error or a tombstone).
func (m *miss[T]) waitEnd(end missEnd, wctx context.Context, err error, notFound bool) {
	w := m.lastWake
	switch {
	case w == WakeFailed:
	case wctx.Err() != nil:
		w = WakeTimeout
	case end == missHeld:
		w = WakeTakeover
	case err != nil || end == missDown:
		w = WakeError
	}
	m.c.emit(m.waitCtx, Event{Kind: EventWaitEnd, Key: m.j.key, Took: time.Since(m.waitStart), Wake: w, Err: err,
		NotFound: notFound})
	m.waited = false
}

// takeover reports whether the lock m holds was won after waiting for
// another holder that vanished without a result.
func (m *miss[T]) takeover() bool { return m.seen != "" }

// resolve runs script.Fetch until it has a value (missValue, with the
// bytes), holds the lock (missHeld; m.token and m.sent say which lease), or
// Redis is down with WithComputeWhenDown set (missDown). ctx is detached from
// the callers; wctx also ends when they all left or the wait timeout passed.
func (m *miss[T]) resolve(ctx, wctx context.Context) (end missEnd, b []byte, err error) {
	defer func() {
		if m.waited {
			m.waitEnd(end, wctx, err, errors.Is(err, ErrNotFound) || entry.IsTombstone(b))
		}
	}()
	for {
		res, err := m.try(wctx)
		if err != nil {
			return m.failed(wctx, err)
		}
		switch kind, _ := script.At[int64](res, 0); kind {
		case script.Value:
			s, _ := script.At[string](res, 1)
			if _, _, derr := m.c.decodeEntry([]byte(s)); derr != nil {
				m.c.decodeError(wctx, m.j.key, derr)
				m.bad = entry.SHA1([]byte(s))
				continue
			}
			return missValue, []byte(s), nil
		case script.Locked:
			// The script found no value in the same atomic step that took
			// the lock, so there is nothing to re-check: another process
			// that stored the value between our GET and now was seen above.
			m.w.Watch(ctx, "") // the holder needs no wake-ups
			if s, ok := script.At[string](res, 1); ok {
				m.j.prev = []byte(s) // the value a Refresh passed over (see Previous)
			}
			return missHeld, nil, nil
		case script.Busy:
			b, err := m.wait(wctx, res)
			if b != nil || err != nil {
				return missValue, b, err
			}
		case script.Failed:
			text, _ := script.At[string](res, 1)
			m.lastWake = WakeFailed
			if msg, ok := strings.CutPrefix(text, notFoundMark); ok {
				return missValue, nil, fmt.Errorf("%w: %q: %s", ErrNotFound, m.j.key, msg)
			}
			return missValue, nil, fmt.Errorf("%w: %q: %s", ErrComputeFailed, m.j.key, text)
		default:
			return missValue, nil, fmt.Errorf("dogpile: fetch %q: unexpected script reply %v", m.j.key, res)
		}
	}
}

// try runs script.Fetch once, in its turn among the Cache's lock attempts;
// or, the first time, returns the reply the miss was started from. Fetch's
// first look (see looks) goes through the client's circuit breaker, as
// its GET would, and a miss it finds is scored (a hit is scored by
// lookWithScript, once it decodes).
func (m *miss[T]) try(wctx context.Context) (res []any, err error) {
	look := m.look
	m.look = false
	if res := m.first; res != nil {
		m.first = nil
		return res, nil
	}
	if err := m.c.attempts.Acquire(wctx, 1); err != nil {
		return nil, fmt.Errorf("%w: %w", redisutil.ErrNotSent, err) // no rollback: nothing was sent
	}
	defer m.c.attempts.Release(1)
	if look {
		done, aerr := m.c.allow(wctx)
		if aerr != nil {
			return nil, aerr
		}
		defer func() { m.c.report(done, err) }()
	}
	m.sent = time.Now()
	keys, lease := []string{m.j.ks.Value, m.j.ks.Lock, m.j.ks.Errs}, redisutil.Millis(m.c.opts.lease)
	if m.seen == "" && m.bad == "" && m.force == "" {
		res, err = script.Fetch.Run(wctx, m.c.client, keys, m.token, lease).Slice() // its common call
	} else {
		res, err = script.Fetch.Run(wctx, m.c.client, keys, m.token, lease, m.seen, m.bad, m.force).Slice()
	}
	if look && err == nil {
		if kind, _ := script.At[int64](res, 0); kind != script.Value {
			m.c.looks.saw(false)
		}
	}
	return res, err
}

// failed handles a script.Fetch call that got no reply.
func (m *miss[T]) failed(wctx context.Context, err error) (missEnd, []byte, error) {
	// The script may have run even though we saw no reply (a timeout, a
	// cancelled wait, a broken connection): undo a lock it may have taken,
	// so no process waits a lease for nothing.
	if redisutil.MayHaveRun(err) {
		m.c.rollback(wctx, releaseCall(m.j.ks, m.token, m.c.publish))
	}
	if wctx.Err() != nil {
		return missValue, nil, m.waitErr(wctx)
	}
	if m.c.opts.computeIfDown && unreachable(err) {
		return missDown, nil, nil
	}
	return missValue, nil, fmt.Errorf("dogpile: fetch %q: %w", m.j.key, err)
}

// wait handles a script.Busy: it subscribes (and then looks again), or waits
// for a wake-up or the holder's lease. It returns the value a wake-up
// carried, an error, or neither: look again.
func (m *miss[T]) wait(wctx context.Context, res []any) ([]byte, error) {
	m.seen, _ = script.At[string](res, 1)
	pttl, _ := script.At[int64](res, 2)
	if old, ok := script.At[string](res, 3); ok {
		m.bad = old // Refresh: the value it passed over is no holder's result
	}
	if m.w.Watch(wctx, m.j.ks.Channel) {
		if wctx.Err() != nil {
			return nil, m.waitErr(wctx)
		}
		return nil, nil // look again, now that no store can go unnoticed
	}
	if !m.waited {
		m.waited, m.waitStart = true, time.Now()
		m.waitCtx = m.c.emit(wctx, Event{Kind: EventWaitStart, Key: m.j.key})
		if m.c.onWait != nil {
			m.c.onWait(m.j.key)
		}
	}
	// Each wait is bounded by the holder's remaining lease: a lost message,
	// or a holder that died, costs at most that long.
	woken, err := m.w.Wait(wctx, redisutil.Wait(pttl, wake.PushCap))
	switch {
	case err != nil:
		return nil, m.waitErr(wctx)
	case woken == wake.Pushed:
		m.c.stats.push.Add(1)
		m.lastWake = WakePush
		if b, ok := m.c.storedBy(m.seen, m.w.Payload()); ok {
			return b, nil
		}
	default:
		m.c.stats.poll.Add(1)
		m.lastWake = WakePoll
	}
	return nil, nil
}

// waitErr is the error of a flight whose wait context ended: the wait
// timeout, named (see WithWaitTimeout), or every caller left.
func (m *miss[T]) waitErr(wctx context.Context) error {
	if errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("dogpile: wait for %q: WithWaitTimeout(%v) passed: %w", m.j.key, m.c.opts.waitTimeout, context.DeadlineExceeded)
	}
	return wctx.Err()
}
