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
	done, err := c.breaker.Allow()
	if err != nil {
		c.stats.unavailable.Add(1)
		return err
	}
	err = f()
	c.logChange(ctx, done(err), err)
	return err
}

// logChange logs an outage that this call's round trip began or ended.
func (c *Cache[T]) logChange(ctx context.Context, ch breaker.Change, err error) {
	if c.opts.logger == nil {
		return
	}
	switch ch {
	case breaker.Opened:
		c.opts.logger.LogAttrs(ctx, slog.LevelError, "dogpile: redis unreachable; calls fail fast until it answers again",
			slog.String("prefix", c.opts.prefix), slog.Any("error", err))
	case breaker.Closed:
		c.opts.logger.LogAttrs(ctx, slog.LevelInfo, "dogpile: redis reachable again", slog.String("prefix", c.opts.prefix))
	}
}

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }
