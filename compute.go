package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// Computing a value under the compute lock and storing it, fenced.

// computeHeld runs j's compute while holding the lock with token, acquired
// by a request sent at sent, and stores the result. again reports that the
// lease was lost and compute failed, or that the store was refused (see
// errRefused): the caller should start over.
func (c *core[T]) computeHeld(ctx context.Context, j *job[T], token string, sent time.Time) (r outcome, again bool) {
	cctx, cancel, ro, stop := c.computeContext(ctx, sent)
	defer stop()
	ro.prev = c.previous(j.prev)
	c.flights.SetBusy(j.cl, ro.taggedWith)
	if c.beforeCompute != nil {
		c.beforeCompute(j.key)
	}
	lease := c.holdLease(sent, cancel, c.extendOne(j.ks, token))
	ro.leased(lease)
	start := time.Now()
	var v T
	cerr := leaseGone(lease)
	if cerr == nil {
		cerr = c.runCompute(cctx, Event{Key: j.key, Refresh: j.refresh}, func(ctx context.Context) (err error) {
			v, err = j.compute(ctx)
			return err
		})
	}
	// What an early refresh must start ahead of expiry: the lock's round
	// trip, the compute, and the store's round trip (about the lock's).
	took := time.Since(start) + 2*start.Sub(sent)
	lost := endLease(lease, cctx)

	b, ttl, err := c.entry(j, v, cerr, took, ro)
	switch {
	case err != nil && lost:
		c.release(ctx, j.ks, token)
		return outcome{}, true
	case err != nil && errors.Is(context.Cause(cctx), ErrClosed):
		c.release(ctx, j.ks, token) // another process takes over at once
		return outcome{err: ErrClosed}, false
	case err != nil:
		if !c.fail(ctx, j, token, err) && j.force && errors.Is(err, ErrNotFound) {
			return outcome{}, true // as a refused store (see below): the old value may be left
		}
		return c.unstored(v, cerr, err), false
	}
	err = c.store(ctx, j, token, b, ttl, ro)
	if errors.Is(err, errRefused) {
		// A write, an invalidation or another holder took the lock: look
		// again rather than hand the value to callers that may have joined
		// after that write returned (in another process, or after an
		// InvalidateTag of a tag compute gave it). A Set's value is then
		// found; after a Delete or an invalidation the key is computed anew.
		return outcome{}, true
	}
	r = outcome{b: b, err: err}
	if errors.Is(cerr, ErrNotFound) { // a tombstone: this process answers with compute's own error
		r.err = errors.Join(cerr, r.err)
	}
	return r, false
}

// unstored is the outcome of a compute whose answer (v, or cerr) could not
// be stored for err: compute's own error, or v with an error naming why
// (it did not encode), as Fetch documents.
func (c *core[T]) unstored(v T, cerr, err error) outcome {
	if cerr != nil {
		return outcome{err: err}
	}
	return outcome{v: v, err: err}
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

// store writes b, computed under the lock with token, for ttl (0: it hands
// b to the waiters without storing it) and wakes the waiters. The write is
// fenced: it happens only if the lock still holds our token. A holder that
// lost its lock (it was paused past its lease and another process took
// over, or the key was Set or Deleted) must not overwrite what is newer;
// its callers still get the value it computed.
//
// With tags (see Tag) the store is made as storeCallFor says.
func (c *core[T]) store(ctx context.Context, j *job[T], token string, b []byte, ttl time.Duration, ro *resultOpts) error {
	dctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	sc, split := c.storeCallFor(j.ks, token, b, ttl, ro)
	if split && c.tagFirst(dctx, ro, []string{j.ks.Value}, []time.Duration{ttl})[0] {
		rc := releaseCall(j.ks, token, c.publish) // the waiters look again
		_ = rc.Run(dctx, c.client).Err()
		return errRefused
	}
	n, err := sc.Run(dctx, c.client).Int64()
	if err == nil && n < 1 { // 0: the lock was not ours; -1: a tag was invalidated
		return errRefused
	}
	return c.stored(ctx, j, token, err)
}

// stored handles the outcome err of j's store: a failed store releases the
// lock, so that no process waits a lease for nothing.
func (c *core[T]) stored(ctx context.Context, j *job[T], token string, err error) error {
	if err == nil || c.opts.computeIfDown && unreachable(err) {
		return nil
	}
	c.rollback(ctx, releaseCall(j.ks, token, c.publish))
	return fmt.Errorf("dogpile: store %q: %w", j.key, err)
}

// fail releases the lock after compute failed with cerr and tells the
// waiting processes; the next Fetch tries again. With a freshness option,
// no process refreshes the key in the background for the retry interval. A
// value found not to exist any more is deleted rather than served stale.
// It reports false only if the lock was no longer ours: nothing was done.
func (c *core[T]) fail(ctx context.Context, j *job[T], token string, cerr error) (done bool) {
	dctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	sc := c.failCall(j.ks, token, cerr)
	n, err := sc.Run(dctx, c.client).Int64()
	return err != nil || n == 1 // only a refusal (the lock was lost) is not done
}

// failCall is the script call of fail.
func (c *core[T]) failCall(ks keyspace.Keys, token string, cerr error) scriptCall {
	text, drop := errText(cerr), ""
	if errors.Is(cerr, ErrNotFound) {
		text, drop = notFoundMark+text, "drop"
	}
	var throttle time.Duration
	if c.opts.stale > 0 || c.opts.beta > 0 {
		throttle = c.opts.refreshRetry
	}
	return scriptCall{Script: script.Fail, Keys: []string{ks.Lock, ks.Errs, ks.Channel, ks.Throttle, ks.Value},
		Args: []any{token, text, redisutil.Millis(c.opts.lease + time.Second), c.publish, redisutil.Millis(throttle), drop}}
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
		return c.unstored(v, nil, fmt.Errorf("dogpile: encode %q: %w", j.key, err))
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

// errText is the text of a failed compute that waiting processes receive,
// cut to a size that is reasonable to keep in Redis, without a leading
// "dogpile: " (they wrap it in an error of their own that has one).
func errText(err error) string {
	const maxLen = 512
	s := strings.TrimPrefix(err.Error(), "dogpile: ")
	if len(s) > maxLen {
		s = s[:maxLen]
	}
	return s
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
