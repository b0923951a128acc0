package dogpile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// The compute lock's lease while compute runs: the same clock and watchdog
// as a lock lease (internal/hold): renewed every third of the lease, a
// failed extension retried with backoff until the lease's safe deadline
// (two lost replies in a row cost nothing), the WithMaxCompute bound as the
// cap past which it is no longer renewed.

// An extender extends the leases of the held locks once, to ttl, and
// reports whether any is still held.
type extender func(ctx context.Context, ttl time.Duration) (held bool, err error)

// extendOne extends the lease of one key's lock held with token.
func (c *core[T]) extendOne(ks keys, token string) extender {
	return func(ctx context.Context, ttl time.Duration) (bool, error) {
		n, err := extendScript.Run(ctx, c.client, []string{ks.lock}, token, redisutil.Millis(ttl)).Int64()
		return n > 0, err
	}
}

// holdLease starts the lease of the locks acquired by a request sent at
// sent (one lease for all the keys of a FetchMany compute), renewed with
// extend while compute runs. Once no lock is held any more, or no
// extension was confirmed before the lease may have run out in Redis, the
// lease is lost and cancel is called with errLeaseLost (errComputeTooLong
// once past the WithMaxCompute bound).
func (c *core[T]) holdLease(sent time.Time, cancel context.CancelCauseFunc, extend extender) *hold.Clock {
	k := new(hold.Clock)
	k.Start(hold.Config{
		Sent: sent, TTL: c.opts.lease, MaxHold: c.opts.maxCompute, AutoExtend: true,
		Lost: errLeaseLost,
		Extend: func(ctx context.Context, ttl time.Duration) hold.Outcome {
			switch held, err := extend(ctx, ttl); {
			case err != nil:
				return hold.Failed
			case !held:
				return hold.Refused
			}
			return hold.Renewed
		},
		OnLost: func() {
			// A lease that runs out at its cap ends as compute's deadline
			// does (see computeContext): the bound is why.
			if capped := c.opts.maxCompute - hold.Drift(c.opts.lease); c.opts.maxCompute > 0 && time.Since(sent) >= capped {
				cancel(c.tooLong())
				return
			}
			cancel(errLeaseLost)
		},
	})
	k.Done() // arms the timer that ends the lease at its safe deadline
	return k
}

// leaseGone returns why the lease k ended, if it ran out before compute
// could start: the process stalled (paused, starved of CPU) between the
// lock's reply and now for longer than the lease, so another process may
// hold the lock and compute already. Compute is then not called at all,
// and the caller goes on as after a lease lost while compute ran. A stall
// after this check is what fenced stores are for.
func leaseGone(k *hold.Clock) error { return k.Err() }

// endLease stops k's renewals once compute returned, and reports whether
// the lease was lost while compute ran: cctx, compute's context, was
// cancelled for it.
func endLease(k *hold.Clock, cctx context.Context) (lost bool) {
	k.StopWatchdog()
	lost = errors.Is(context.Cause(cctx), errLeaseLost)
	k.End(errComputeEnded)
	return lost
}

// tooLong is the cause that ends compute's context after the bound set by
// WithMaxCompute: errComputeTooLong, naming the option and its bound
// (compute may return the cause as its error).
func (c *core[T]) tooLong() error {
	return fmt.Errorf("%w of %v (WithMaxCompute)", errComputeTooLong, c.opts.maxCompute)
}
