package dogpile

import (
	"context"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/servertime"
)

// Refreshing a value before callers have to wait for it: in the background
// when a hit finds it stale or due for an early refresh, or on demand
// (Refresh).

// stale reports whether a value read with pttl is past its TTL, in its
// stale window (see WithStale).
func (c *core[T]) stale(pttl time.Duration) bool {
	return c.opts.stale > 0 && pttl >= 0 && pttl <= c.opts.stale
}

// due reports whether a value read with pttl and meta m should be refreshed
// now, and the highest PTTL at which it still should (refreshScript checks it
// again in Redis, so a value that another process refreshed meanwhile is
// left alone).
func (c *core[T]) due(pttl time.Duration, m meta) (limit time.Duration, ok bool) {
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
func (c *core[T]) refreshLater(ctx context.Context, j *job[T], limit time.Duration) {
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
