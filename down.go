package dogpile

import (
	"context"

	"github.com/dogpile-go/dogpile/internal/breaker"
)

// ErrUnavailable is returned, wrapped, by calls that did not go to Redis
// because Redis was found unreachable moments ago. The client's first
// failed dial, or a call that fails to reach Redis, opens the client's
// circuit: from then on every Cache and lock on that client, and every
// command the program sends on it, fails at once instead of spending
// go-redis's dial retries (about 1.7 s) per call or the caller's whole
// deadline. One call every 100 ms goes through as a probe; the first that
// reaches Redis ends the outage for all, so calls succeed again within
// about a tenth of a second of Redis's return, whatever the outage's
// length. Each outage is logged when it begins and when it ends (and once
// a minute while it lasts) to every logger given to the client's caches
// and locks ([WithLogger], lock.WithLogger). With [WithComputeWhenDown],
// Fetch computes instead, deduplicated in the process.
// lock.ErrUnavailable is the same error.
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
	c.report(done, err)
	return err
}

// allow asks the client's breaker whether a call may go to Redis (see
// Breaker.Allow), counting the calls it turns away. read and readMany use
// it and report directly, with no closure on the hit path.
func (c *Cache[T]) allow() (func(error), error) {
	done, err := c.breaker.Allow()
	if err != nil {
		c.stats.unavailable.Add(1)
	}
	return done, err
}

// report hands the outcome of an allowed call's round trip to the breaker,
// which logs the outage it began or ended, if any.
func (c *Cache[T]) report(done func(error), err error) { done(err) }

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }
