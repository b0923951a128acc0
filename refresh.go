package dogpile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/servertime"
)

// Refreshing a value before callers have to wait for it: in the background
// when a hit finds it stale or due for an early refresh, or on demand
// (Refresh).

// stale reports whether a value read with pttl is past its TTL, in its
// stale window (see WithStale).
func (c *Cache[T]) stale(pttl time.Duration) bool {
	return c.opts.stale > 0 && pttl >= 0 && pttl <= c.opts.stale
}

// due reports whether a value read with pttl and meta m should be refreshed
// now, and the highest PTTL at which it still should (refreshScript checks it
// again in Redis, so a value that another process refreshed meanwhile is
// left alone).
func (c *Cache[T]) due(pttl time.Duration, m meta) (limit time.Duration, ok bool) {
	if pttl < 0 || m.notFound {
		return 0, false
	}
	// pttl read from the entry may fall short of the truth by up to Slack:
	// refreshScript, which reads the true PTTL, is let start that much early.
	slack := servertime.Slack
	if c.opts.stale > 0 && pttl <= c.opts.stale {
		return c.opts.stale + slack, true
	}
	if c.opts.beta > 0 && m.early > 0 && pttl <= c.opts.stale+m.early {
		return c.opts.stale + m.early + slack, true
	}
	return 0, false
}

// refreshLater starts a background refresh of j, unless one runs in this
// process already. It takes the compute lock only if no other process holds
// it, no refresh failed within the retry interval, and the value's PTTL is
// still at most limit; then it computes and stores as a Fetch would, waking
// any process that waits for the key.
func (c *Cache[T]) refreshLater(ctx context.Context, j *job[T], limit time.Duration) {
	j.flight = flightID{laterFlight, j.ks.value}
	cl, ok := c.flights.start(j.flight)
	if !ok {
		return
	}
	j.cl = cl
	ctx, stop := c.life.detach(ctx)
	started := c.life.goBackground(func() {
		var r outcome
		defer func() { c.flights.end(j.flight, cl, r) }()
		defer stop()
		lctx, cancel := context.WithTimeout(ctx, c.opts.lease)
		defer cancel()
		if c.attempts.take(lctx) != nil {
			return
		}
		token, sent := redisutil.Token(), time.Now()
		n, err := c.run(lctx, refreshScript, []string{j.ks.value, j.ks.lock, j.ks.throttle},
			token, redisutil.Millis(c.opts.lease), redisutil.Millis(limit)).Int()
		c.attempts.give()
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
		c.flights.end(j.flight, cl, outcome{err: ErrClosed})
	}
}

// Refresh computes the value of key now and stores it for ttl, even if a
// fresh value is cached, under the same fleet-wide compute lock as Fetch: if
// another process is computing key at that moment, Refresh waits for its
// result and returns it instead of computing again. Concurrent Refresh calls
// for key in one process share one compute (one that starts after a Set,
// Delete or Refresh of key returned computes anew), and once Refresh
// returns, later calls of this Cache do not return an older value (a Refresh
// whose store is refused, its lock taken by a write or an invalidation
// meanwhile, looks again and computes again). Processes waiting for key are
// woken as by a Fetch. Errors are as for [Cache.Fetch]: compute's error
// (nothing is stored, waiters get [ErrComputeFailed]), or a Redis error,
// wrapped; an empty key or a ttl below a millisecond, one matching
// [ErrInvalid]. Refresh panics if compute is nil.
func (c *Cache[T]) Refresh(ctx context.Context, key string, ttl time.Duration, compute func(ctx context.Context) (T, error)) (T, error) {
	if compute == nil {
		panic("dogpile: nil compute function (a programmer error)")
	}
	if err := c.checkTTL(key, ttl); err != nil {
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
	flight := flightID{refreshFlight, vk}
	cl, lead := c.flights.join(flight, true) // its compute writes after every write before it
	if !lead {
		c.stats.shared.Add(1)
	} else {
		j := &job[T]{flight: flight, key: key, ks: keysFor(vk), ttl: ttl, compute: compute, cl: cl, down: down, force: true}
		c.startFlight(ctx, j, true)
	}
	v, err, _ := c.await(ctx, key, flight, cl)
	c.forget(vk) // this process reads its own refresh at once
	return v, err
}
