package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Fetch returns the value cached under key. On a miss it calls compute,
// stores the result for ttl and returns it. Concurrent misses for key, in
// this process or in any process that shares the Redis server, call
// compute once; the other callers wait for the stored value and are woken
// by Redis the moment it is stored.
//
// A hit costs one round trip (a GET, or the lock script while most of the
// Cache's first looks miss, see the package doc), or none from the near
// tier (see [WithNearCache]). While more GETs are in progress on the
// client than twice GOMAXPROCS, those of different keys share pipelines:
// a busy process's hits share their system calls, nearly half of a lone
// hit's cost, on the client and the server; a lone hit's GET goes straight
// out. The client's hooks see such
// GETs in a pipeline, on a context with the values of its first caller.
// Concurrent Fetch calls for one key in one process share a single
// flight: one first look, and on a miss one lock attempt (the look itself,
// when it was the lock script) and one compute or one wait. Every caller
// receives its own copy of the value, decoded from the stored bytes,
// except near hits, which share one.
//
// compute runs on a context detached from the caller's (it keeps the
// caller's values, not its cancellation): callers that give up must not
// fail the others, who still want the value, nor leave other processes
// waiting for a compute that was abandoned. That context is cancelled only
// when this process loses the compute lock (it could not renew the lease,
// or the key was Set or Deleted meanwhile); compute should bound its own
// work otherwise. If ctx is done first, Fetch returns ctx.Err() at once;
// the one exception is the first caller's first look (its GET, or the lock
// script), which runs on its own ctx in its own goroutine (no extra
// goroutine on the hit path), so its deadline bounds the round trip only
// if the client was created with redis.Options.ContextTimeoutEnabled (else
// go-redis's read timeout does), or if the GET waits in a pipeline with
// others (it leaves at ctx's end, and is not sent if it was still queued).
// A first caller whose ctx can never end (context.Background) runs the
// whole miss, compute included, in the goroutine that called Fetch: it
// would wait for it anyway.
//
// When compute returns an error or panics, nothing is stored and the lock
// is released at once. Callers in this process receive compute's error
// (a panic becomes an error). Callers in other processes that were waiting
// for this compute receive an error matching [ErrComputeFailed]; they do
// not retry the compute themselves (the next Fetch does), so a failing
// backend is called once per failure, not once per waiting process.
//
// Stored bytes that do not decode, and a key of another type (a list),
// count as a miss: recomputed and overwritten (see [Stats].DecodeErrors).
// Redis errors are returned wrapped, and compute is not called, unless
// [WithComputeWhenDown] is set. If compute succeeded but storing its result
// failed, Fetch returns the value together with the error.
//
// An empty key or a ttl below a millisecond returns an error matching
// [ErrInvalid] (keys and TTLs may come from data). Fetch panics if compute
// is nil, a programmer error.
func (c *Cache[T]) Fetch(ctx context.Context, key string, ttl time.Duration, compute func(ctx context.Context) (T, error)) (T, error) {
	if compute == nil {
		panic("dogpile: nil compute function (a programmer error)")
	}
	if err := c.checkTTL(key, ttl); err != nil {
		var zero T
		return zero, err
	}
	vk := c.valueKey(key)
	if c.near != nil {
		if v, err, ok := c.nearHit(ctx, key, vk); ok {
			return v, err
		}
	}
	for {
		v, err, retry := c.fetch(ctx, key, vk, ttl, compute)
		if !retry {
			return v, err
		}
	}
}

// errRetry ends a flight whose first caller gave up during the GET: the
// callers that joined it start over (one of them leads the next flight).
var errRetry = errors.New("dogpile: retry")

// fetch makes one attempt; retry reports that the flight it joined was
// abandoned by its first caller, and the caller should start over.
func (c *Cache[T]) fetch(ctx context.Context, key, vk string, ttl time.Duration, compute func(context.Context) (T, error)) (v T, err error, retry bool) {
	id := flightID{fetchFlight, vk}
	cl, lead := c.flights.join(id, c.heard())
	if !lead {
		c.stats.shared.Add(1)
		if err := c.turnedAway(); err != nil {
			return v, fmt.Errorf("dogpile: fetch %q: %w", key, err), false
		}
		return c.await(ctx, key, id, cl)
	}
	defer c.endIfPanic(id, cl)
	if c.looks.script() { // most first looks miss: the lock script looks
		return c.lookWithScript(ctx, &job[T]{flight: id, key: key, ks: keysFor(vk), ttl: ttl, compute: compute, cl: cl})
	}
	// The hit path: one round trip, run by the first caller on its own
	// context (its deadline applies to its own round trip). Only the value
	// key is built here; the other names are derived on a miss.
	tk := c.nearTicket(vk) // before the read: an invalidation during it bars the value
	b, pttl, o, err := c.read(ctx, vk, id, cl)
	var bad string // SHA1 of stored bytes that did not decode
	down := false
	switch {
	case err == nil:
		v, m, derr := c.decodeEntry(b)
		if derr == nil {
			c.looks.saw(true)
			r := outcome{b: b, hit: true, stale: !m.notFound && c.stale(pttl)}
			// Into the near tier before the flight ends: a caller that got
			// b must not find an older value there at its next Fetch.
			c.nearPut(vk, tk, o, b, m, pttl)
			c.flights.end(id, cl, r)
			c.count(ctx, key, r, m.notFound)
			if limit, ok := c.due(pttl, m); ok {
				c.refreshLater(ctx, &job[T]{flight: id, key: key, ks: keysFor(vk), ttl: ttl, compute: compute}, limit)
			}
			if m.notFound {
				return v, notFound(key), false
			}
			return v, nil, false
		}
		c.decodeError(ctx, key, derr)
		bad = sha1hex(b)
	case err == redis.Nil:
		c.looks.saw(false)
	case ctx.Err() != nil:
		c.flights.end(id, cl, outcome{err: errRetry})
		return v, ctx.Err(), false
	case c.opts.computeIfDown && unreachable(err):
		down = true
	default:
		err = redisutil.Failed(ctx, "dogpile", "get", key, err)
		c.flights.end(id, cl, outcome{err: err})
		return v, err, false
	}
	c.startFlight(ctx, &job[T]{flight: id, key: key, ks: keysFor(vk), ttl: ttl, compute: compute, cl: cl, bad: bad, down: down}, true)
	return c.await(ctx, key, id, cl)
}

// read is the hit path's round trip: a GET, which tells the value's
// remaining TTL when freshness options or the near tier need it (see
// readRedis). pttl is negative when it was not read or the key has no TTL. With
// the near tier, o is the Owner of the value when it was read on a tracked
// connection (see near.Owner), nil otherwise; before a read on another,
// the flight cl (named id) is made one no later caller joins. It goes through the client's circuit breaker
// (see ErrUnavailable) without a closure, which would cost every hit an
// allocation.
func (c *Cache[T]) read(ctx context.Context, vk string, id flightID, cl *call) (b []byte, pttl time.Duration, o *near.Owner, err error) {
	done, err := c.allow(ctx)
	if err != nil {
		return nil, -1, nil, err
	}
	if c.near != nil {
		b, pttl, o, err = c.readNear(ctx, vk, id, cl)
	} else {
		b, pttl, err = c.readRedis(ctx, c.client, vk)
	}
	c.report(done, err)
	return b, pttl, o, err
}

// readNear reads vk on one of the near tier's tracked connections if one
// is free, and otherwise through the client, after making the flight cl
// one no later caller joins (see Cache.unheard): also
// when the reader could not serve the read (its node answered with an
// error, a Cluster's slot that moved; its connection failed or its session
// ended), unless ctx ended or the read timed out (the server is slow: the
// client would wait as long again).
func (c *Cache[T]) readNear(ctx context.Context, vk string, id flightID, cl *call) (b []byte, pttl time.Duration, o *near.Owner, err error) {
	o, err, ok := c.near.t.Read(ctx, c.near.t.Node(vk), func(cn redis.Cmdable) error {
		var rerr error
		b, pttl, rerr = c.readRedis(ctx, cn, vk)
		return rerr
	})
	switch {
	case ok && o != nil && !answered(err):
		return b, pttl, o, err
	case ok && err != nil && (ctx.Err() != nil || timedOut(err)):
		return nil, -1, nil, err
	}
	c.unheard(id, cl)
	b, pttl, err = c.readRedis(ctx, c.client, vk)
	return b, pttl, nil, err
}

// timedOut reports whether err is a network timeout.
func timedOut(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// answered reports whether err is an error reply other than redis.Nil:
// the node could not serve the read.
func answered(err error) bool {
	return err != nil && err != redis.Nil && near.IsReply(err)
}

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
func (c *Cache[T]) startFlight(ctx context.Context, j *job[T], here bool) {
	here = here && ctx.Done() == nil
	base, stop := c.life.detach(ctx)
	var wctx context.Context
	var cancel context.CancelFunc
	if c.opts.waitTimeout > 0 {
		wctx, cancel = context.WithTimeout(base, c.opts.waitTimeout)
	} else {
		wctx, cancel = context.WithCancel(base)
	}
	c.flights.detach(j.cl, cancel)
	started := c.life.run(here, func() {
		defer stop()
		defer cancel()
		r := c.runMiss(base, wctx, j)
		if r.err != nil && c.life.done() {
			r = outcome{err: ErrClosed} // whatever the cancellation made of it
		}
		c.flights.end(j.flight, j.cl, r)
	})
	if !started {
		cancel()
		stop()
		if j.m != nil {
			j.m.abandon(ctx)
		}
		c.flights.end(j.flight, j.cl, outcome{err: ErrClosed})
	}
}

// await waits for the flight cl of key (flight is its name in the group),
// or for ctx.
func (c *Cache[T]) await(ctx context.Context, key string, flight flightID, cl *call) (v T, err error, retry bool) {
	select {
	case <-cl.done:
	case <-ctx.Done():
		c.flights.leave(flight, cl)
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		// The flight's round trip may be what held the caller up, on a
		// server that stopped answering: the breaker asks the server (see
		// ErrUnavailable), which costs a PING if it was only slow.
		c.breaker.Observe(ctx.Err())
		return v, ctx.Err(), false
	}
	if cl.err == errRetry {
		return v, nil, true
	}
	if cl.b == nil {
		c.count(ctx, key, cl.outcome, errors.Is(cl.err, ErrNotFound))
		if u, ok := cl.v.(T); ok {
			v = u // computed but not stored: it did not encode
		}
		return v, cl.err, false
	}
	growStack(0) // before the codec's deep frames (see growStack)
	v, m, derr := c.decodeEntry(cl.b)
	c.count(ctx, key, cl.outcome, m.notFound)
	switch {
	case derr != nil: // cannot happen: the flight decoded b already
		return v, fmt.Errorf("dogpile: decode %q: %w", key, derr), false
	case m.notFound && errors.Is(cl.err, ErrNotFound):
		return v, cl.err, false // compute's own error, in the process that computed
	case m.notFound:
		return v, notFound(key), false
	}
	return v, cl.err, false
}

// count reports a caller's answer: a hit, stale or not, or a miss; either
// may be "not found".
func (c *Cache[T]) count(ctx context.Context, key string, r outcome, notFound bool) {
	if r.hit {
		c.emit(ctx, Event{Kind: EventHit, Key: key, Stale: r.stale, NotFound: notFound})
	} else {
		c.emit(ctx, Event{Kind: EventMiss, Key: key, NotFound: notFound})
	}
}

// runMiss is the miss path of one process for one key: it looks across the
// fleet (see miss) and computes when it wins the lock. ctx is detached from
// the callers; wctx also ends when every caller left or the wait timeout
// passed.
func (c *Cache[T]) runMiss(ctx, wctx context.Context, j *job[T]) (r outcome) {
	defer func() {
		if p := recover(); p != nil { // a bug here must not crash the caller's process
			r = outcome{err: fmt.Errorf("dogpile: fetch %q: internal panic: %v\n%s", j.key, p, debug.Stack())}
		}
	}()
	if j.down {
		return c.computeLocal(ctx, j)
	}
	m := j.m
	if m == nil {
		m = c.newMiss(j.key, j.ks, j.bad, j.force)
		m.first = j.first
	}
	defer m.close()
	for {
		end, b, err := m.resolve(ctx, wctx)
		switch {
		case err != nil || end == missValue:
			return outcome{b: b, err: err}
		case end == missDown:
			return c.computeLocal(ctx, j)
		}
		if m.takeover() {
			c.stats.takeovers.Add(1)
			c.log(ctx, slog.LevelWarn, "dogpile: took over the compute of a holder that vanished", j.key)
		}
		r, again := c.computeHeld(ctx, j, m.token, m.sent)
		if !again {
			return r
		}
		// Our lease was lost while compute ran (the key was Set or Deleted,
		// or Redis was unreachable for a lease) and compute gave up, or a
		// Refresh's store was refused: look again, as a newcomer.
		m.restart()
	}
}
