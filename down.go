package dogpile

import (
	"context"
	"log/slog"

	"github.com/dogpile-go/dogpile/internal/breaker"
)

// ErrUnavailable is returned, wrapped, by calls that did not go to Redis
// because Redis was found unreachable moments ago: once a call fails to
// reach it (after go-redis's own retries), every Cache and lock on the
// same client fails at once (well under a millisecond) instead of spending go-redis's dial
// retries (about 1.7 s) per call. One call in a while (every 250 ms) goes
// through as a probe; the first that reaches Redis ends the outage for all.
// With [WithComputeWhenDown], Fetch computes instead, deduplicated in the
// process. lock.ErrUnavailable is the same error.
var ErrUnavailable = breaker.ErrUnavailable

// guard runs f, the first round trip of a call, through the client's
// circuit breaker (see ErrUnavailable): while Redis is known to be
// unreachable it returns ErrUnavailable without calling f.
func (c *Cache[T]) guard(ctx context.Context, f func() error) error {
	done, err := c.allow()
	if err != nil {
		return err
	}
	err = f()
	c.report(ctx, done, err)
	return err
}

// allow asks the client's breaker whether a call may go to Redis (see
// Breaker.Allow), counting the calls it turns away. read and readMany use
// it and report directly, with no closure on the hit path.
func (c *Cache[T]) allow() (func(error) breaker.Change, error) {
	done, err := c.breaker.Allow()
	if err != nil {
		c.stats.unavailable.Add(1)
	}
	return done, err
}

// report hands the outcome of an allowed call's round trip to the breaker
// and logs the outage it began or ended, if any.
func (c *Cache[T]) report(ctx context.Context, done func(error) breaker.Change, err error) {
	done(err).Log(ctx, c.opts.logger, "dogpile", err, slog.String("prefix", c.opts.prefix))
}

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }
