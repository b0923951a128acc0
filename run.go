package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
	"github.com/dogpile-go/dogpile/internal/servertime"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A flight's run, away from its callers: its miss across the fleet and the
// compute it may win (startFlight, runMiss), the callers' wait for its
// outcome (await), and the refresh of a value in the background before
// callers have to wait for it.

// startFlight runs the miss path of j in its own goroutine, on a context
// detached from the leader's, so that the leader may leave on its own ctx
// like the other callers (see Fetch).
//
// A leader whose ctx can never end (no Done channel: Background, TODO,
// WithoutCancel) runs it in the calling goroutine instead, if here is true:
// it waits for the flight's end whatever happens, so a goroutine to leave
// it behind would buy it nothing, and the hand-off costs a cold miss a
// thread's wake-up (about a tenth of its time to compute, see
// bench/README.md). The other callers still join and leave as they
// like. Callers that start several flights at once pass false.
func (c *core[T]) startFlight(ctx context.Context, j *job[T], here bool) {
	here = here && ctx.Done() == nil
	base, stop := c.life.Detach(ctx)
	var wctx context.Context
	var cancel context.CancelFunc
	if c.opts.waitTimeout > 0 {
		wctx, cancel = context.WithTimeout(base, c.opts.waitTimeout)
	} else {
		wctx, cancel = context.WithCancel(base)
	}
	c.flights.Detach(j.cl, cancel)
	started := c.life.Run(here, func() {
		defer stop()
		defer cancel()
		r := c.runMiss(base, wctx, j)
		if r.err != nil && c.life.Done() {
			r = outcome{err: ErrClosed} // whatever the cancellation made of it
		}
		c.flights.End(j.flight, j.cl, r)
	})
	if !started {
		cancel()
		stop()
		if j.m != nil {
			j.m.abandon(ctx)
		}
		c.flights.End(j.flight, j.cl, outcome{err: ErrClosed})
	}
}

// runMiss is the miss path of one process for one key: it looks across the
// fleet (see fleetMiss) and computes when it wins the lock, or, when Redis
// is unreachable and WithComputeWhenDown is set, computes without it. ctx
// is detached from the callers; wctx also ends when every caller left or
// the wait timeout passed.
func (c *core[T]) runMiss(ctx, wctx context.Context, j *job[T]) (r outcome) {
	defer func() {
		if p := recover(); p != nil { // a bug here must not crash the caller's process
			r = outcome{err: fmt.Errorf("dogpile: fetch %q: internal panic: %v\n%s", j.key, p, debug.Stack())}
		}
	}()
	if !j.down {
		if r, down := c.fleetMiss(ctx, wctx, j); !down {
			return r
		}
	}
	return c.computeLocal(ctx, j)
}

// fleetMiss looks for j's value across the fleet (see miss) until it has
// it, or holds the lock and computed it; down reports that Redis is
// unreachable and WithComputeWhenDown is set.
func (c *core[T]) fleetMiss(ctx, wctx context.Context, j *job[T]) (r outcome, down bool) {
	m := j.m
	if m == nil {
		m = c.newMiss(j)
	}
	defer m.close()
	for {
		end, b, err := m.resolve(ctx, wctx)
		switch {
		case err != nil || end == missValue:
			return outcome{b: b, err: err}, false
		case end == missDown:
			return outcome{}, true
		}
		if m.takeover() {
			c.stats.takeovers.Add(1)
			c.log(ctx, slog.LevelWarn, "dogpile: took over the compute of a holder that vanished", j.key)
		}
		r, again := c.computeHeld(ctx, j, m.token, m.sent)
		if !again {
			return r, false
		}
		// Our lease was lost while compute ran (the key was Set or Deleted,
		// or Redis was unreachable for a lease) and compute gave up, or a
		// Refresh's store was refused: look again, as a newcomer.
		m.restart()
	}
}

// await waits for the flight cl of key (flight is its name in the group),
// or for ctx.
func (c *core[T]) await(ctx context.Context, key string, flight flightID, cl *call) (v T, err error, retry bool) {
	select {
	case <-cl.Done():
	case <-ctx.Done():
		c.flights.Leave(flight, cl)
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		// The flight's round trip may be what held the caller up, on a
		// server that stopped answering: the breaker asks the server (see
		// ErrUnavailable), which costs a PING if it was only slow.
		c.breaker.Observe(ctx.Err())
		return v, ctx.Err(), false
	}
	if cl.Result.err == errRetry {
		return v, nil, true
	}
	if cl.Result.b == nil {
		c.count(ctx, key, cl.Result, errors.Is(cl.Result.err, ErrNotFound))
		if u, ok := cl.Result.v.(T); ok {
			v = u // computed but not stored: it did not encode
		}
		return v, cl.Result.err, false
	}
	growStack(0) // before the codec's deep frames (see growStack)
	v, m, derr := c.decodeEntry(cl.Result.b)
	c.count(ctx, key, cl.Result, m.NotFound)
	switch {
	case derr != nil: // cannot happen: the flight decoded b already
		return v, fmt.Errorf("dogpile: decode %q: %w", key, derr), false
	case m.NotFound && errors.Is(cl.Result.err, ErrNotFound):
		return v, cl.Result.err, false // compute's own error, in the process that computed
	case m.NotFound:
		return v, errNotFound(key), false
	}
	return v, cl.Result.err, false
}

// growStack makes room on the calling goroutine's stack for a decode, in one
// copy made while few frames are on it. A caller that waited for a flight is
// often a goroutine started for this request, whose stack begins at 2 KiB; a
// codec's decode (msgpack's reflection) needs more, and the runtime grows a
// stack by copying it and fixing up every frame on it, which deep in the
// codec's frames was the dearest work a woken waiter did (bench/HISTORY.md,
// "Figures moved out of code comments"). A stack already this deep pays only
// the zeroing of the frame, once per waiting caller, never on a hit.
//
//go:noinline
func growStack(i int) byte {
	var frame [waiterFrame]byte
	frame[i] = 1 // i is 0: a frame the compiler cannot drop
	return frame[len(frame)-1-i]
}

// waiterFrame is growStack's frame: with the frames of Fetch and a shallow
// caller below it, a stack of 2 or 4 KiB becomes 8 KiB, which msgpack's
// decode of a struct fits in (16 KiB under callers over about 3 KiB deep).
const waiterFrame = 4 << 10

// Refreshing a value before callers have to wait for it: in the background
// when a hit finds it stale or due for an early refresh, or on demand
// (Refresh, in fetch.go).

// stale reports whether a value read with pttl is past its TTL, in its
// stale window (see WithStale).
func (c *core[T]) stale(pttl time.Duration) bool {
	return c.opts.stale > 0 && pttl >= 0 && pttl <= c.opts.stale
}

// due reports whether a value read with pttl and meta m should be refreshed
// now, and the highest PTTL at which it still should (script.Refresh checks it
// again in Redis, so a value that another process refreshed meanwhile is
// left alone).
func (c *core[T]) due(pttl time.Duration, m entry.Meta) (limit time.Duration, ok bool) {
	if pttl < 0 || m.NotFound {
		return 0, false
	}
	// pttl read from the entry may fall short of the truth by up to Slack:
	// script.Refresh, which reads the true PTTL, is let start that much early.
	slack := servertime.Slack
	if c.opts.stale > 0 && pttl <= c.opts.stale {
		return c.opts.stale + slack, true
	}
	if c.opts.beta > 0 && m.Early > 0 && pttl <= c.opts.stale+m.Early {
		return c.opts.stale + m.Early + slack, true
	}
	return 0, false
}

// refreshLater starts a background refresh of j (a laterFlight job), unless one runs in this
// process already. It takes the compute lock only if no other process holds
// it, no refresh failed within the retry interval, and the value's PTTL is
// still at most limit; then it computes and stores as a Fetch would, waking
// any process that waits for the key.
func (c *core[T]) refreshLater(ctx context.Context, j *job[T], limit time.Duration) {
	cl, ok := c.flights.Start(j.flight)
	if !ok {
		return
	}
	j.cl = cl
	ctx, stop := c.life.Detach(ctx)
	started := c.life.Go(func() {
		var r outcome
		defer func() { c.flights.End(j.flight, cl, r) }()
		defer stop()
		lctx, cancel := context.WithTimeout(ctx, c.opts.lease)
		defer cancel()
		if c.attempts.Acquire(lctx, 1) != nil {
			return
		}
		token, sent := redisutil.Token(), time.Now()
		n, err := script.Refresh.Run(lctx, c.client, []string{j.ks.Value, j.ks.Lock, j.ks.Throttle},
			token, redisutil.Millis(c.opts.lease), redisutil.Millis(limit)).Int()
		c.attempts.Release(1)
		if redisutil.MayHaveRun(err) {
			c.rollback(ctx, releaseCall(j.ks, token, c.publish)) // it may have taken the lock
		}
		if err != nil || n == 0 {
			return
		}
		j.refresh = true
		r, _ = c.computeHeld(ctx, j, token, sent)
	})
	if !started {
		stop()
		c.flights.End(j.flight, cl, outcome{err: ErrClosed})
	}
}

// softWait waits up to WithSoftTimeout, and ctx, for a value of vk other
// than stale, the stale entry a hit found, to be stored fresh (by a refresh
// of this process or another: every store wakes the key's channel), and
// returns it. It reads the key again once subscribed, since a store may
// have come between the hit and the subscription.
func (c *core[T]) softWait(ctx context.Context, vk string, stale []byte) (b []byte, v T, m entry.Meta, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.softTimeout)
	defer cancel()
	w := wake.NewWaiter(c.client, pollMin, pollMax)
	defer w.Close()
	w.Watch(ctx, keyspace.For(vk).Channel)
	old := entry.SHA1(stale)
	for ctx.Err() == nil {
		b, pttl, err := c.readRedis(ctx, c.client, vk)
		if err == nil && !c.stale(pttl) && entry.SHA1(b) != old {
			if v, m, derr := c.decodeEntry(b); derr == nil {
				return b, v, m, true
			}
		}
		if _, err := w.Wait(ctx, 0); err != nil {
			break
		}
	}
	return nil, v, m, false
}
