package dogpile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// A caller's Fetch and Refresh: the near tier, the flight it joins or
// leads, and the first look that a leader makes (a GET, or the lock
// script). The flight runs, and its callers wait for it, in run.go.

// Fetch returns the value cached under key or, on a miss, compute's result,
// stored for ttl. Of concurrent misses for key in the fleet, one calls compute
// and the rest get its value (each its own copy, but for near hits). compute's
// context keeps ctx's values, not its cancellation, and ends only if this
// process loses the compute lock or the Cache closes; if ctx ends first, Fetch
// returns ctx.Err(). A compute that fails or panics stores nothing and frees
// the lock: callers in this process get its error, others [ErrComputeFailed]. A
// failed store is returned with the value. Redis errors are wrapped, with no
// compute, unless [WithComputeWhenDown]. A ttl of 0 is [WithDefaultTTL]'s.
// An empty key or a ttl below a millisecond returns an error matching
// [ErrInvalid]; a nil compute panics.
func (c *Cache[T]) Fetch(ctx context.Context, key string, ttl time.Duration, compute func(ctx context.Context) (T, error)) (T, error) {
	if compute == nil {
		panic("dogpile: nil compute function (a programmer error)")
	}
	ttl, err := c.checkTTL(key, ttl)
	if err != nil {
		var zero T
		return zero, err
	}
	vk := c.valueKey(key)
	if v, err, ok := c.nearHit(ctx, key, vk, c.opts.computeIfDown); ok {
		return v, err
	}
	for {
		v, err, retry := c.fetch(ctx, key, vk, ttl, compute)
		if retry {
			continue
		}
		if errors.Is(err, ErrUnavailable) {
			// After the breaker turned the call away (and, past its
			// cooldown, asked the servers again): a copy is served only
			// while they stay silent.
			if v, err, ok := c.downHit(ctx, key, vk); ok {
				return v, err
			}
		}
		return v, err
	}
}

// fetch makes one attempt; retry reports that the flight it joined was
// abandoned by its first caller, and the caller should start over.
func (c *core[T]) fetch(ctx context.Context, key, vk string, ttl time.Duration, compute func(context.Context) (T, error)) (v T, err error, retry bool) {
	id := flightID{Kind: fetchFlight, Key: vk}
	cl, lead := c.flights.Join(id, c.near.Heard())
	if !lead {
		c.stats.shared.Add(1)
		if err := c.turnedAway(); err != nil {
			return v, fmt.Errorf("dogpile: fetch %q: %w", key, err), false
		}
		return c.await(ctx, key, id, cl)
	}
	defer c.endIfPanic(id, cl)
	if c.looks.script() { // most first looks miss: the lock script looks
		return c.lookWithScript(ctx, newJob(id, key, ttl, compute, cl))
	}
	// The hit path: one round trip, run by the first caller on its own
	// context (its deadline applies to its own round trip). Only the value
	// key is built here; the other names are derived on a miss.
	tk := c.near.Ticket(vk) // before the read: an invalidation during it bars the value
	b, pttl, o, err := c.read(ctx, vk, id, cl)
	var bad string // SHA1 of stored bytes that did not decode
	down := false
	switch {
	case err == nil:
		v, m, derr := c.decodeEntry(b)
		if derr == nil {
			c.looks.saw(true)
			r := outcome{b: b, hit: true, stale: !m.NotFound && c.stale(pttl)}
			// Into the near tier before the flight ends: a caller that got
			// b must not find an older value there at its next Fetch.
			c.near.Put(vk, tk, o, b, m, pttl)
			if limit, ok := c.due(pttl, m); ok {
				j := newJob(flightID{Kind: laterFlight, Key: vk}, key, ttl, compute, nil)
				j.prev = b
				c.refreshLater(ctx, j, limit)
			}
			if r.stale && c.opts.softTimeout > 0 {
				// The flight stays open meanwhile: its followers wait too.
				if fb, fv, fm, ok := c.softWait(ctx, vk, b); ok {
					r, v, m = outcome{b: fb, hit: true}, fv, fm
				}
			}
			c.flights.End(id, cl, r)
			c.count(ctx, key, r, m.NotFound)
			if m.NotFound {
				return v, errNotFound(key), false
			}
			return v, nil, false
		}
		c.decodeError(ctx, key, derr)
		bad = entry.SHA1(b)
	case err == redis.Nil:
		c.looks.saw(false)
	case ctx.Err() != nil:
		c.flights.End(id, cl, outcome{err: errRetry})
		return v, ctx.Err(), false
	case c.opts.computeIfDown && unreachable(err):
		down = true
	default:
		err = redisutil.Failed(ctx, "dogpile", "get", key, err)
		c.flights.End(id, cl, outcome{err: err})
		return v, err, false
	}
	j := newJob(id, key, ttl, compute, cl)
	j.bad, j.down = bad, down
	c.startFlight(ctx, j, true)
	return c.await(ctx, key, id, cl)
}

// Refresh computes key's value now and stores it for ttl, even over a fresh
// one, or returns the result of another process computing key. Concurrent
// Refreshes in one process share a compute; once one returns, later calls of
// this Cache return nothing older. Errors and panics are as for [Cache.Fetch].
func (c *Cache[T]) Refresh(ctx context.Context, key string, ttl time.Duration, compute func(ctx context.Context) (T, error)) (T, error) {
	if compute == nil {
		panic("dogpile: nil compute function (a programmer error)")
	}
	ttl, err := c.checkTTL(key, ttl)
	if err != nil {
		var zero T
		return zero, err
	}
	// Refresh has no read of its own to probe Redis with: while the
	// circuit is open it fails fast, or computes without the cache; when
	// the circuit lets a probe through, a PING is that probe (else a
	// process that only refreshes would never see Redis come back).
	var probe error
	if c.breaker.Open() {
		probe = c.guard(ctx, func() error { return c.client.Ping(ctx).Err() })
	}
	down := probe != nil
	if down && !c.opts.computeIfDown {
		if !errors.Is(probe, ErrUnavailable) { // else guard counted it
			c.stats.unavailable.Add(1)
		}
		var zero T
		return zero, fmt.Errorf("dogpile: refresh %q: %w", key, ErrUnavailable)
	}
	vk := c.valueKey(key)
	flight := flightID{Kind: refreshFlight, Key: vk}
	cl, lead := c.flights.Join(flight, true) // its compute writes after every write before it
	if !lead {
		c.stats.shared.Add(1)
	} else {
		j := newJob(flight, key, ttl, compute, cl)
		j.down, j.force = down, true
		c.startFlight(ctx, j, true)
	}
	v, err, _ := c.await(ctx, key, flight, cl)
	c.forget(vk) // this process reads its own refresh at once
	return v, err
}

// lookWithScript is Fetch's first look with the lock script, for the
// flight j that the caller leads. A value that decodes is a hit, answered
// here. Any other reply (the lock, now ours; a holder to wait for; a
// holder's failure) goes on in the flight's miss (see startFlight), which
// starts from it; bytes that do not decode, as after a GET, in a miss
// whose first try passes over them.
func (c *core[T]) lookWithScript(ctx context.Context, j *job[T]) (v T, err error, retry bool) {
	m := c.newMiss(j)
	m.look = true
	res, err := m.try(ctx)
	if err != nil {
		return c.lookFailed(ctx, j, m, err)
	}
	if kind, _ := script.At[int64](res, 0); kind == script.Value {
		s, _ := script.At[string](res, 1)
		b := []byte(s)
		v, meta, derr := c.decodeEntry(b)
		if derr == nil {
			m.close()
			c.looks.saw(true)
			r := outcome{b: b, hit: true}
			c.flights.End(j.flight, j.cl, r)
			c.count(ctx, j.key, r, meta.NotFound)
			if meta.NotFound {
				return v, errNotFound(j.key), false
			}
			return v, nil, false
		}
		c.decodeError(ctx, j.key, derr)
		m.bad, res = entry.SHA1(b), nil
	}
	m.first, j.m = res, m
	c.startFlight(ctx, j, true)
	return c.await(ctx, j.key, j.flight, j.cl)
}

// lookFailed ends the flight j whose first look, with the lock script,
// got no reply, as a failed GET would: its callers start over if the
// first caller's ctx ended, else they get the error, unless Redis is
// unreachable and WithComputeWhenDown is set. A lock the script may have
// taken is released first; callers that start over wait for that release
// (the Cache's background work, see Close), or the look one of them leads
// would find this one's lock and wait for it as for another process's
// compute.
func (c *core[T]) lookFailed(ctx context.Context, j *job[T], m *miss[T], err error) (v T, _ error, retry bool) {
	m.close()
	left := ctx.Err() // read once: an end during the rollback below is not the caller's leaving
	mayHold := redisutil.MayHaveRun(err)
	release := releaseCall(m.j.ks, m.token, c.publish)
	if left != nil && mayHold && c.life.Go(func() {
		rctx, cancel := redisutil.Detached(ctx)
		defer cancel()
		redisutil.RunScripts(rctx, c.client, []scriptCall{release})
		c.flights.End(j.flight, j.cl, outcome{err: errRetry})
	}) {
		return v, left, false
	}
	if mayHold {
		c.rollback(ctx, release) // after Close too, as other undos
	}
	r := outcome{err: errRetry}
	switch {
	case left != nil:
		c.flights.End(j.flight, j.cl, r)
		return v, left, false
	case c.opts.computeIfDown && unreachable(err):
		j.down = true
		c.startFlight(ctx, j, true)
		return c.await(ctx, j.key, j.flight, j.cl)
	}
	r.err = fmt.Errorf("dogpile: fetch %q: %w", j.key, err)
	c.flights.End(j.flight, j.cl, r)
	return v, r.err, false
}

// endIfPanic, deferred by a flight's leader, ends the flight cl (named
// id) if the leader is panicking (in a client hook, say) before it handed
// the flight to a goroutine of its own, and panics on: a program that
// recovers (net/http does) must not find the key's later callers joining a
// flight nobody ends.
func (c *core[T]) endIfPanic(id flightID, cl *call) {
	if p := recover(); p != nil {
		c.flights.EndUnlessDetached(id, cl, outcome{err: fmt.Errorf("dogpile: panic in the first look: %v", p)})
		panic(p)
	}
}
