package dogpile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
	"github.com/dogpile-go/dogpile/internal/servertime"
	"github.com/dogpile-go/dogpile/internal/wake"
)

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
	if v, err, ok := c.nearHit(ctx, key, vk); ok {
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
				return v, notFound(key), false
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

// Refreshing a value before callers have to wait for it: in the background
// when a hit finds it stale or due for an early refresh, or on demand
// (Refresh).

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
