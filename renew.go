package dogpile

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// A renewal extends the compute lock's lease every third of the lease
// while compute runs.
type renewal struct {
	stop, done chan struct{}
	lost       atomic.Bool
}

// An extender extends the leases of the held locks once and reports
// whether any is still held.
type extender func(ctx context.Context) (held bool, err error)

// extendOne extends the lease of one key's lock held with token.
func (c *Cache[T]) extendOne(ks keys, token string) extender {
	return func(ctx context.Context) (bool, error) {
		n, err := c.run(ctx, extendScript, []string{ks.lock}, token, redisutil.Millis(c.opts.lease)).Int64()
		return n > 0, err
	}
}

// renew starts renewing, with extend, the leases acquired by a request sent
// at sent (one renewer for all the keys of a FetchMany compute). If no lock
// is held any more, or no extension is confirmed before the leases may have
// run out in Redis, the lease is lost and cancel is called with
// errLeaseLost.
func (c *Cache[T]) renew(ctx context.Context, sent time.Time, cancel context.CancelCauseFunc, extend extender) *renewal {
	r := &renewal{stop: make(chan struct{}), done: make(chan struct{})}
	lease := c.opts.lease
	// From the holder's point of view the lease is safe only until
	// sent+lease-drift, whatever Redis said: the reply may have been slow.
	drift := lease/100 + 2*time.Millisecond
	interval := lease / 3
	go func() {
		defer close(r.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		deadline := time.NewTimer(time.Until(sent.Add(lease - drift)))
		defer deadline.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-deadline.C:
				r.lost.Store(true)
				cancel(errLeaseLost)
				return
			case <-tick.C:
			}
			s := time.Now()
			if limit := c.opts.maxCompute; limit > 0 && s.Sub(sent) >= limit {
				continue // let the lease run out: another process takes over
			}
			rctx, rcancel := context.WithTimeout(ctx, interval)
			held, err := extend(rctx)
			rcancel()
			switch {
			case err != nil: // try again at the next tick, within the deadline
			case !held:
				r.lost.Store(true)
				cancel(errLeaseLost)
				return
			default:
				deadline.Reset(time.Until(s.Add(lease - drift)))
			}
		}
	}()
	return r
}

// end stops the renewal and reports whether the lease was lost.
func (r *renewal) end() bool {
	close(r.stop)
	<-r.done
	return r.lost.Load()
}
