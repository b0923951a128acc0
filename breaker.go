package dogpile

import (
	"context"
	"runtime"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/redis/go-redis/v9"
)

// guard runs f, the first round trip of a call, through the client's
// circuit breaker (see ErrUnavailable): while Redis is known to be
// unreachable it returns ErrUnavailable without calling f.
func (c *Cache[T]) guard(ctx context.Context, f func() error) error {
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
func (c *Cache[T]) allow(ctx context.Context) (func(error), error) {
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
func (c *Cache[T]) turnedAway() error {
	if c.opts.computeIfDown || !c.breaker.Open() {
		return nil
	}
	c.stats.unavailable.Add(1)
	return c.breaker.Err()
}

// report hands the outcome of an allowed call's round trip to the breaker,
// which logs the outage it began or ended, if any.
func (c *Cache[T]) report(done func(error), err error) { done(err) }

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }

// turns bounds the lock attempts (fetch and refresh scripts) a Cache sends
// at once: half its client's connection pool. When many keys miss at once,
// the store of a finished compute, the one command that wakes every waiting
// process, must not queue in the pool behind lock attempts for keys that
// missed later (head-of-line blocking, see bench/HISTORY.md, "Figures moved
// out of code comments"). Lock attempts wait for their turn in the Cache
// instead; hits, stores and releases are not limited, and always find a
// connection. (A Cache whose first looks mostly miss looks with the lock
// script, see looks: that look takes a turn, hit or miss.)
type turns chan struct{}

func newTurns(client redis.UniversalClient) turns {
	size := 10 * runtime.GOMAXPROCS(0) // go-redis's default for a Client
	switch c := client.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize
	case *redis.Ring:
		size = c.Options().PoolSize
	}
	return make(turns, max(1, size/2))
}

// take waits for a turn to send a lock attempt; give gives it back.
func (t turns) take(ctx context.Context) error {
	select {
	case t <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t turns) give() { <-t }
