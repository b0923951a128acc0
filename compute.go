package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Computing a value under the compute lock and storing it, fenced.

// computeHeld runs j's compute while holding the lock with token, acquired
// by a request sent at sent, and stores the result. again reports that the
// lease was lost and compute failed, or that the store was refused (see
// errRefused): the caller should start over.
func (c *core[T]) computeHeld(ctx context.Context, j *job[T], token string, sent time.Time) (r outcome, again bool) {
	cctx, cancel, ro, stop := c.computeContext(ctx, sent)
	defer stop()
	c.flights.setBusy(j.cl, ro)
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
	ro = &resultOpts{vouch: true, epochs: c.readEpochs}
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
	if split && c.tagFirst(dctx, ro, []string{j.ks.value}, []time.Duration{ttl})[0] {
		rc := releaseCall(j.ks, token, c.publish) // the waiters look again
		_ = c.run(dctx, rc.s, rc.keys, rc.args...).Err()
		return errRefused
	}
	n, err := c.run(dctx, sc.s, sc.keys, sc.args...).Int64()
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
	n, err := c.run(dctx, sc.s, sc.keys, sc.args...).Int64()
	return err != nil || n == 1 // only a refusal (the lock was lost) is not done
}

// failCall is the script call of fail.
func (c *core[T]) failCall(ks keys, token string, cerr error) scriptCall {
	text, drop := errText(cerr), ""
	if errors.Is(cerr, ErrNotFound) {
		text, drop = notFoundMark+text, "drop"
	}
	var throttle time.Duration
	if c.opts.stale > 0 || c.opts.beta > 0 {
		throttle = c.opts.refreshRetry
	}
	return scriptCall{failScript, []string{ks.lock, ks.errs, ks.channel, ks.throttle, ks.value},
		[]any{token, text, redisutil.Millis(c.opts.lease + time.Second), c.publish, redisutil.Millis(throttle), drop}}
}

// computeLocal runs j's compute without the cache, when Redis is
// unreachable and WithComputeWhenDown is set.
func (c *core[T]) computeLocal(ctx context.Context, j *job[T]) outcome {
	c.flights.setBusy(j.cl, nil)
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

// entry turns compute's answer for j (v, or cerr) into the entry to store
// and its TTL: a value with the metadata the freshness options need, or a
// tombstone for ErrNotFound with WithNegativeTTL. took is how long the
// value took to get, round trips included. It returns an error if there is
// nothing to store: compute failed, or the value does not encode.
func (c *core[T]) entry(j *job[T], v T, cerr error, took time.Duration, ro *resultOpts) (b []byte, ttl time.Duration, err error) {
	fresh, ttl := c.storeTTL(j.ttl, ro)
	m := entry.Meta{}
	if errors.Is(cerr, ErrNotFound) && c.opts.negativeTTL > 0 {
		cerr, ttl, m = nil, c.jittered(c.opts.negativeTTL), entry.Meta{NotFound: true, Took: took}
	} else if c.opts.beta > 0 && fresh > 0 {
		m = entry.Meta{Took: took, Early: c.earlyGap(took, fresh)}
	}
	if cerr != nil {
		return nil, 0, cerr
	}
	if b, err = c.encodeEntry(v, m); err != nil {
		return nil, 0, fmt.Errorf("dogpile: encode %q: %w", j.key, err)
	}
	return b, ttl, nil
}

// storeTTL is how long a computed value is fresh, the TTL compute set (see
// SetTTL) or the caller's, spread by WithTTLJitter, and how long it stays
// in Redis: that plus the stale window. 0 stores nothing.
func (c *core[T]) storeTTL(ttl time.Duration, ro *resultOpts) (fresh, stored time.Duration) {
	if d, ok := ro.get(); ok {
		if d <= 0 {
			return 0, 0
		}
		ttl = d
	}
	fresh = c.jittered(ttl)
	return fresh, fresh + c.opts.stale
}

// jittered is ttl spread by up to ±WithTTLJitter's fraction of it, never
// below a millisecond (Redis's resolution).
func (c *core[T]) jittered(ttl time.Duration) time.Duration {
	if c.opts.jitter == 0 {
		return ttl
	}
	spread := c.opts.jitter * (2*rand.Float64() - 1)
	return max(time.Millisecond, ttl+time.Duration(float64(ttl)*spread))
}

// earlyGap draws, once per stored value, how long before its TTL runs out
// the value is refreshed (see WithEarlyRefresh). The floor is twice took: a
// refresh started only took before expiry has no room for a late start (the
// hit that notices, the goroutine, the lock's round trip) or a compute
// slower than the last, and callers then wait at expiry: with a floor of δ·β
// they did, with 2·δ·β they did not, for a few more computes
// (bench/HISTORY.md, "Figures moved out of code comments"). The cap of a
// third of the TTL keeps a key to at most 1.5 computes per TTL period (about
// 1.25 when δ is a tenth of the TTL).
//
// Unlike the paper, which draws on each read, the gap is drawn once, by the
// process that stores the value, and kept in the entry. Drawn on each read,
// the chance that some read refreshes early grows with the call rate: at
// thousands of calls a second the refresh would start near δ·β·ln(rate·δ)
// before expiry, several times a TTL period. With one draw per value every
// process agrees on one refresh point, which neither drifts earlier with
// load nor comes later than 2·δ·β before expiry; the draw also spreads the
// refreshes of many keys stored at the same moment.
func (c *core[T]) earlyGap(took, ttl time.Duration) time.Duration {
	draw := earlyFloor - math.Log(1-rand.Float64()) // 2 − ln u, u in (0, 1]
	gap := time.Duration(float64(took) * c.opts.beta * draw)
	return min(gap, ttl/3)
}

// earlyFloor is the least early-refresh gap, in units of δ·β (see earlyGap).
const earlyFloor = 2
