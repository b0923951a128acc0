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
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Computing a value under the compute lock and storing it, fenced.

// A job is one key's miss in one process: what to compute and where to
// store it.
type job[T any] struct {
	flight  flightID // the flight the job serves
	key     string
	ks      keys
	ttl     time.Duration
	compute func(context.Context) (T, error)
	cl      *call    // the flight the result goes to
	refresh bool     // a background refresh (see refreshLater)
	first   []any    // FetchMany's lock reply for key (never "locked"), to start the miss from
	m       *miss[T] // the miss begun by Fetch's first look, with its reply (see lookWithScript)

	// How the miss starts (see Cache.runMiss).
	bad   string // SHA1 of stored bytes that did not decode, or ""
	down  bool   // Redis is unreachable and WithComputeWhenDown is set: compute without it
	force bool   // Refresh's: compute even if a value is there
}

// errComputeTooLong is the cause that ends compute's context after the
// bound set by WithMaxCompute (see Cache.tooLong).
var errComputeTooLong = errors.New("dogpile: compute ran past its limit")

// tooLong is the cause that ends compute's context after the bound set by
// WithMaxCompute: errComputeTooLong, naming the option and its bound
// (compute may return the cause as its error).
func (c *Cache[T]) tooLong() error {
	return fmt.Errorf("%w of %v (WithMaxCompute)", errComputeTooLong, c.opts.maxCompute)
}

// errLeaseLost is the cancellation cause of compute's context when the
// compute lock was lost.
var errLeaseLost = errors.New("dogpile: compute lock lost")

// computeHeld runs j's compute while holding the lock with token, acquired
// by a request sent at sent, and stores the result. again reports that the
// lease was lost and compute failed, or that the store was refused (see
// errRefused): the caller should start over.
func (c *Cache[T]) computeHeld(ctx context.Context, j *job[T], token string, sent time.Time) (r outcome, again bool) {
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
func (c *Cache[T]) unstored(v T, cerr, err error) outcome {
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
func (c *Cache[T]) computeContext(ctx context.Context, sent time.Time) (cctx context.Context, cancel context.CancelCauseFunc, ro *resultOpts, stop func()) {
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
func (c *Cache[T]) store(ctx context.Context, j *job[T], token string, b []byte, ttl time.Duration, ro *resultOpts) error {
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

// errRefused is store's answer when nothing was stored because the lock no
// longer held our token (a Set, Delete or InvalidateTag took it, or the
// lease ran out and another process took over), or because an
// InvalidateTag of a tag compute gave the value came after compute tagged
// it (the lock was then released). The flight looks again (see
// computeHeld).
var errRefused = errors.New("dogpile: store refused")

// storeCall is the script call of store.
func (c *Cache[T]) storeCall(ks keys, token string, b []byte, ttl time.Duration) scriptCall {
	return scriptCall{storeScript, []string{ks.value, ks.lock, ks.channel},
		[]any{token, b, redisutil.Millis(ttl), c.publish, maxWakeValue}}
}

// stored handles the outcome err of j's store: a failed store releases the
// lock, so that no process waits a lease for nothing.
func (c *Cache[T]) stored(ctx context.Context, j *job[T], token string, err error) error {
	if err == nil || c.opts.computeIfDown && unreachable(err) {
		return nil
	}
	c.rollback(ctx, releaseCall(j.ks, token, c.publish))
	return fmt.Errorf("dogpile: store %q: %w", j.key, err)
}

// notFoundMark starts the error text of a compute that found no value, so
// that waiting processes return ErrNotFound rather than ErrComputeFailed.
const notFoundMark = "\x00not found: "

// fail releases the lock after compute failed with cerr and tells the
// waiting processes; the next Fetch tries again. With a freshness option,
// no process refreshes the key in the background for the retry interval. A
// value found not to exist any more is deleted rather than served stale.
// It reports false only if the lock was no longer ours: nothing was done.
func (c *Cache[T]) fail(ctx context.Context, j *job[T], token string, cerr error) (done bool) {
	dctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	sc := c.failCall(j.ks, token, cerr)
	n, err := c.run(dctx, sc.s, sc.keys, sc.args...).Int64()
	return err != nil || n == 1 // only a refusal (the lock was lost) is not done
}

// failCall is the script call of fail.
func (c *Cache[T]) failCall(ks keys, token string, cerr error) scriptCall {
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
func (c *Cache[T]) computeLocal(ctx context.Context, j *job[T]) outcome {
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
func (c *Cache[T]) runCompute(ctx context.Context, e Event, f func(context.Context) error) (err error) {
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

// A panicError is a compute's panic. Its text carries the panic value only:
// it reaches the callers and, cut to 512 bytes, the other processes; the
// stack goes to the log (see WithLogger).
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("dogpile: compute panicked: %v", e.value) }

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
