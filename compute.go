package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Computing a value under the compute lock and storing it, fenced.

// A job is one key's miss in one process: what to compute and where to
// store it.
type job[T any] struct {
	flight  string // the flight's name in the group: key, or a name derived from it
	key     string
	ks      keys
	ttl     time.Duration
	compute func(context.Context) (T, error)
	cl      *call // the flight the result goes to
	refresh bool  // a background refresh (see refreshLater)
}

// errComputeTooLong is the cause that ends compute's context after the
// bound set by WithMaxCompute.
var errComputeTooLong = errors.New("dogpile: compute ran past its limit")

// errLeaseLost is the cancellation cause of compute's context when the
// compute lock was lost.
var errLeaseLost = errors.New("dogpile: compute lock lost")

// earlyFloor is the least early-refresh gap, in units of δ·β (see earlyGap).
const earlyFloor = 2

// cleanupTimeout bounds a release or store that runs after the callers may
// have left.
const cleanupTimeout = 3 * time.Second

// computeHeld runs j's compute while holding the lock with token, acquired
// by a request sent at sent, and stores the result. again reports that the
// lease was lost and compute failed: the caller should start over.
func (c *Cache[T]) computeHeld(ctx context.Context, j *job[T], token string, sent time.Time) (b []byte, err error, again bool) {
	c.flights.setBusy(j.cl)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.opts.maxCompute > 0 {
		var tcancel context.CancelFunc
		cctx, tcancel = context.WithTimeoutCause(cctx, c.opts.maxCompute, errComputeTooLong)
		defer tcancel()
	}
	ro := &resultOpts{}
	cctx = context.WithValue(cctx, resultKey{}, ro)
	r := c.renew(ctx, j.ks, token, sent, cancel)
	start := time.Now()
	v, cerr := c.runCompute(cctx, j)
	// What an early refresh must start ahead of expiry: the lock's round
	// trip, the compute, and the store's round trip (about the lock's).
	took := time.Since(start) + 2*start.Sub(sent)
	lost := r.end()

	ttl, m := c.storeTTL(j.ttl, ro), meta{}
	if errors.Is(cerr, ErrNotFound) && c.opts.negativeTTL > 0 {
		cerr, ttl, m = nil, c.opts.negativeTTL, meta{notFound: true, took: took}
	} else if c.opts.beta > 0 {
		m = meta{took: took, early: c.earlyGap(took, j.ttl)}
	}
	if cerr == nil {
		if b, cerr = c.encodeEntry(v, m); cerr != nil {
			cerr = fmt.Errorf("dogpile: encode %q: %w", j.key, cerr)
		}
	}
	if cerr != nil {
		if lost && errors.Is(context.Cause(cctx), errLeaseLost) {
			c.release(ctx, j.ks, token)
			return nil, nil, true
		}
		c.fail(ctx, j, token, cerr)
		return nil, cerr, false
	}
	return b, c.store(ctx, j, token, b, ttl), false
}

// storeTTL is how long a computed value stays in Redis: the TTL compute set
// (see SetTTL) or the caller's, plus the stale window; 0 stores nothing.
func (c *Cache[T]) storeTTL(ttl time.Duration, ro *resultOpts) time.Duration {
	if d, ok := ro.get(); ok {
		if d <= 0 {
			return 0
		}
		ttl = d
	}
	return ttl + c.opts.stale
}

// earlyGap draws, once per stored value, how long before its TTL runs out
// the value is refreshed (see WithEarlyRefresh). The floor is twice took: a
// refresh started only took before expiry has no room for a late start (the
// hit that notices, the goroutine, the lock's round trip) or a compute
// slower than the last, and callers then wait at expiry.
func (c *Cache[T]) earlyGap(took, ttl time.Duration) time.Duration {
	draw := earlyFloor - math.Log(1-rand.Float64()) // 2 − ln u, u in (0, 1]
	gap := time.Duration(float64(took) * c.opts.beta * draw)
	return min(gap, ttl/3)
}

// store writes b, computed under the lock with token, for ttl (0: it hands
// b to the waiters without storing it) and wakes the waiters. The write is
// fenced: it happens only if the lock still holds our token. A holder that
// lost its lock (it was paused past its lease and another process took
// over, or the key was Set or Deleted) must not overwrite what is newer;
// its callers still get the value it computed.
func (c *Cache[T]) store(ctx context.Context, j *job[T], token string, b []byte, ttl time.Duration) error {
	dctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	err := c.run(dctx, storeScript, []string{j.ks.value, j.ks.lock, j.ks.channel},
		token, b, redisutil.Millis(ttl), c.publish, maxWakeValue).Err()
	if err == nil || c.opts.computeIfDown && unreachable(err) {
		return nil
	}
	c.release(ctx, j.ks, token)
	return fmt.Errorf("dogpile: store %q: %w", j.key, err)
}

// notFoundMark starts the error text of a compute that found no value, so
// that waiting processes return ErrNotFound rather than ErrComputeFailed.
const notFoundMark = "\x00not found: "

// fail releases the lock after compute failed with cerr and tells the
// waiting processes; the next Fetch tries again. With a freshness option,
// no process refreshes the key in the background for the retry interval. A
// value found not to exist any more is deleted rather than served stale.
func (c *Cache[T]) fail(ctx context.Context, j *job[T], token string, cerr error) {
	dctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	text, drop := errText(cerr), ""
	if errors.Is(cerr, ErrNotFound) {
		text, drop = notFoundMark+text, "drop"
	}
	var throttle time.Duration
	if c.opts.stale > 0 || c.opts.beta > 0 {
		throttle = c.opts.refreshRetry
	}
	_ = c.run(dctx, failScript, []string{j.ks.lock, j.ks.errs, j.ks.channel, j.ks.throttle, j.ks.value},
		token, text, redisutil.Millis(c.opts.lease+time.Second), c.publish, redisutil.Millis(throttle), drop).Err()
}

// computeLocal runs j's compute without the cache, when Redis is
// unreachable and WithComputeWhenDown is set.
func (c *Cache[T]) computeLocal(ctx context.Context, j *job[T]) ([]byte, error) {
	c.flights.setBusy(j.cl)
	v, err := c.runCompute(ctx, j)
	if err != nil {
		return nil, err
	}
	b, err := c.encode(v)
	if err != nil {
		return nil, fmt.Errorf("dogpile: encode %q: %w", j.key, err)
	}
	return b, nil
}

// runCompute calls j's compute, turning a panic into an error (its stack
// goes to the log, not to the callers), between a ComputeStart and a
// ComputeEnd event.
func (c *Cache[T]) runCompute(ctx context.Context, j *job[T]) (v T, err error) {
	ctx = c.emit(ctx, Event{Kind: EventComputeStart, Key: j.key, Refresh: j.refresh})
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			p := &panicError{value: r, stack: debug.Stack()}
			c.log(ctx, slog.LevelError, "dogpile: compute panicked", j.key, slog.Any("panic", r), slog.String("stack", string(p.stack)))
			err = p
		}
		c.emit(ctx, Event{Kind: EventComputeEnd, Key: j.key, Refresh: j.refresh, Took: time.Since(start), Err: err})
	}()
	return j.compute(ctx)
}

// A panicError is a compute's panic. Its text carries the panic value only:
// it reaches the callers and, cut to 512 bytes, the other processes; the
// stack goes to the log (see WithLogger).
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("dogpile: compute panicked: %v", e.value) }

// release gives up the lock if it still holds token, and wakes waiters.
func (c *Cache[T]) release(ctx context.Context, ks keys, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = c.run(ctx, releaseScript, []string{ks.lock, ks.channel}, token, c.publish).Err()
}

// errText is the text of a failed compute that waiting processes receive,
// cut to a size that is reasonable to keep in Redis.
func errText(err error) string {
	const maxLen = 512
	s := err.Error()
	if len(s) > maxLen {
		s = s[:maxLen]
	}
	return s
}
