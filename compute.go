package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// Computing a value under the compute lock and storing it, fenced.

// computeHeld runs j's compute while holding the lock with token, acquired
// by a request sent at sent, and settles the result (see settle). again
// reports that the lease was lost and compute failed, or that the store
// was refused (see errRefused): the caller should start over.
func (c *core[T]) computeHeld(ctx context.Context, j *job[T], token string, sent time.Time) (r outcome, again bool) {
	cctx, cancel, ro, stop := c.computeContext(ctx, sent)
	defer stop()
	ro.prev = c.previous(j.prev)
	c.flights.SetBusy(j.cl, ro.taggedWith)
	if c.beforeCompute != nil {
		c.beforeCompute(j.key)
	}
	extend := c.extendOne(j.ks, token)
	var v T
	cerr, took, lost := c.underLease(cctx, cancel, ro, sent, extend,
		Event{Key: j.key, Refresh: j.refresh}, func(ctx context.Context) (err error) {
			v, err = j.compute(ctx)
			return err
		})
	b, ttl, err := c.entry(j, v, cerr, took, ro)
	return c.settle(ctx, j, token, computed[T]{b: b, ttl: ttl, err: err, v: v, cerr: cerr, lost: lost,
		closed: errors.Is(context.Cause(cctx), ErrClosed), ro: ro})
}

// underLease runs f, a compute, between the events that e makes, while it
// holds the lease of locks acquired by a request sent at sent (one lease
// for all the keys of a FetchMany compute), renewed with extend (see
// holdLease). It returns f's error, how long an early refresh must start
// ahead of expiry (took: the lock's round trip, the compute, and the
// store's round trip, about the lock's), and whether the lease was lost
// while f ran: cctx, f's context, was cancelled for it.
//
// A lease that ran out before f could start (the process stalled, paused
// or starved of CPU, between the lock's reply and now for longer than the
// lease, so another process may hold the lock and compute already) is not
// run at all: the caller goes on as after a lease lost while f ran. A
// stall after this check is what fenced stores are for.
func (c *core[T]) underLease(cctx context.Context, cancel context.CancelCauseFunc, ro *resultOpts, sent time.Time,
	extend extender, e Event, f func(context.Context) error) (cerr error, took time.Duration, lost bool) {
	lease := c.holdLease(sent, cancel, extend)
	ro.lease = lease // before compute runs, which alone reads it (see resultOpts.read)
	start := time.Now()
	if cerr = lease.Err(); cerr == nil {
		cerr = c.runCompute(cctx, e, f)
	}
	took = time.Since(start) + 2*start.Sub(sent)
	lease.StopWatchdog()
	lost = errors.Is(context.Cause(cctx), errLeaseLost)
	lease.End(errComputeEnded)
	return cerr, took, lost
}

// computeContext returns the context compute runs with, for locks
// acquired by a request sent at sent: cancelled with a cause when the lease
// is lost (cancel) and once WithMaxCompute's bound has passed, and carrying
// what compute may say about its result (SetTTL). stop releases it. The
// bound ends compute's context just before the lease, capped at the same
// bound (see holdLease), stops being safe: the cause says why.
func (c *core[T]) computeContext(ctx context.Context, sent time.Time) (cctx context.Context, cancel context.CancelCauseFunc, ro *resultOpts, stop func()) {
	cctx, cancel = context.WithCancelCause(ctx)
	stop = func() { cancel(nil) }
	if c.opts.maxCompute > 0 {
		var tcancel context.CancelFunc
		end := sent.Add(c.opts.maxCompute - hold.Drift(c.opts.lease))
		cctx, tcancel = context.WithDeadlineCause(cctx, end, c.tooLong())
		stop = func() { tcancel(); cancel(nil) }
	}
	ro = &resultOpts{vouch: true, epochs: c.space.ReadEpochs}
	return context.WithValue(cctx, resultKey{}, ro), cancel, ro, stop
}

// computeLocal runs j's compute without the cache, when Redis is
// unreachable and WithComputeWhenDown is set.
func (c *core[T]) computeLocal(ctx context.Context, j *job[T]) outcome {
	c.flights.SetBusy(j.cl, nil)
	var v T
	err := c.runCompute(ctx, Event{Key: j.key}, func(ctx context.Context) (err error) {
		v, err = j.compute(ctx)
		return err
	})
	if err != nil {
		return outcome{err: err}
	}
	b, err := c.encode(v)
	if err != nil {
		return outcome{v: v, err: fmt.Errorf("dogpile: encode %q: %w", j.key, err)} // the value, uncached
	}
	return outcome{b: b}
}

// runCompute calls f, a compute, turning a panic into an error (its stack
// goes to the log, not to the callers), between a ComputeStart and a
// ComputeEnd event made from e. A compute that failed once Close had ended
// its context ends with ErrClosed: a clean shutdown is no compute error.
func (c *core[T]) runCompute(ctx context.Context, e Event, f func(context.Context) error) (err error) {
	cctx := ctx
	e.Kind = EventComputeStart
	ctx = c.emit(ctx, e)
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			p := &panicError{value: r, stack: debug.Stack()}
			c.log(ctx, slog.LevelError, "dogpile: compute panicked", e.Key, slog.Any("panic", r), slog.String("stack", string(p.stack)))
			err = p
		}
		e.Kind, e.Took, e.Err, e.NotFound = EventComputeEnd, time.Since(start), err, errors.Is(err, ErrNotFound)
		if err != nil && errors.Is(context.Cause(cctx), ErrClosed) {
			e.Err, e.NotFound = ErrClosed, false
		}
		c.emit(ctx, e)
	}()
	return f(ctx)
}

// An extender extends the leases of the held locks once, to ttl, and
// reports whether any is still held.
type extender func(ctx context.Context, ttl time.Duration) (held bool, err error)

// extendOne extends the lease of one key's lock held with token.
func (c *core[T]) extendOne(ks keyspace.Keys, token string) extender {
	return func(ctx context.Context, ttl time.Duration) (bool, error) {
		n, err := script.Extend.Run(ctx, c.client, []string{ks.Lock}, token, redisutil.Millis(ttl)).Int64()
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

// tooLong is the cause that ends compute's context after the bound set by
// WithMaxCompute: errComputeTooLong, naming the option and its bound
// (compute may return the cause as its error).
func (c *core[T]) tooLong() error {
	return fmt.Errorf("%w of %v (WithMaxCompute)", errComputeTooLong, c.opts.maxCompute)
}
