package dogpile

import (
	"context"

	"github.com/dogpile-go/dogpile/internal/breaker"
)

// guard runs f, the first round trip of a call, through the client's
// circuit breaker (see ErrUnavailable): while Redis is known to be
// unreachable it returns ErrUnavailable without calling f.
func (c *core[T]) guard(ctx context.Context, f func() error) error {
	done, err := c.allow(ctx)
	if err != nil {
		return err
	}
	err = f()
	c.report(done, err)
	return err
}

// allow asks the client's breaker whether a call may go to Redis (see
// Breaker.Allow), counting the calls it turns away. read and readMany use
// it and report directly, with no closure on the hit path.
func (c *core[T]) allow(ctx context.Context) (func(error), error) {
	done, err := c.breaker.Allow(ctx)
	if err != nil {
		c.stats.unavailable.Add(1)
	}
	return done, err
}

// turnedAway returns the error of a call that would wait for a flight
// while the client's circuit is open: that flight needs Redis (unless it
// computes without it, WithComputeWhenDown), and it may hang on a server
// that stopped answering until its read times out, so the caller fails
// at once, as one that reads would.
func (c *core[T]) turnedAway() error {
	if c.opts.computeIfDown || !c.breaker.Open() {
		return nil
	}
	c.stats.unavailable.Add(1)
	return c.breaker.Err()
}

// report hands the outcome of an allowed call's round trip to the breaker,
// which logs the outage it began or ended, if any.
func (c *core[T]) report(done func(error), err error) { done(err) }

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }
