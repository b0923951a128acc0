package redisutil

import (
	"context"
	"time"
)

// A rollback undoes what a request may have done in Redis although its
// caller saw it fail: an acquire whose reply never came (a timeout, a
// cancelled context, a broken connection) may have taken a lock, and
// leaving it would block everyone for a whole TTL or lease. The cache's
// compute lock and every lock primitive undo such requests this one way.
//
// Rollbacks run in the background, so that no call outlives its context
// waiting for one while Redis is slow or stopped: a caller whose context is
// still live waits for its rollback at most RollbackGrace, which a healthy
// Redis needs a fraction of, so that normally the state is clean when the
// call returns (after a broken connection, say); a caller whose context is
// done does not wait at all. (Waiting the grace after a deadline made a
// timed-out Mutex.Lock return late, twice as late for a Semaphore.Acquire's
// two rollbacks: bench/HISTORY.md, "Figures moved out of code comments".
// Waiting for the whole undo, as the cache once did, held the callers of a
// failed compute-lock attempt for up to CleanupTimeout more while Redis was
// stalled.) They are bounded twice: each by CleanupTimeout, and at most
// maxRollbacks at a time per process. Past that many Redis is clearly not
// answering, and further rollbacks are dropped: what they would undo expires
// within one TTL anyway.
const maxRollbacks = 256

// RollbackGrace is how long a caller whose context is live waits for its
// rollback; a variable for a test to lengthen.
var RollbackGrace = 5 * time.Millisecond

var rollbackSlots = make(chan struct{}, maxRollbacks)

// Rollback runs undo in the background on a context detached from ctx's
// cancellation (it keeps ctx's values), bounded by CleanupTimeout, and
// waits for it at most RollbackGrace, and not once ctx is done.
func Rollback(ctx context.Context, undo func(ctx context.Context)) {
	rollback(ctx, RollbackGrace, ctx.Done(), undo)
}

// RollbackWithin runs undo as Rollback does, but waits for it up to wait
// whether or not ctx is done: for an undo that the caller's next call, or
// another process's, must find done whenever Redis answers in time (a
// lock's waiter that gave up takes back its place in line), at the price
// of returning up to wait after ctx's deadline.
func RollbackWithin(ctx context.Context, wait time.Duration, undo func(ctx context.Context)) {
	rollback(ctx, wait, nil, undo)
}

// rollback runs undo in the background and waits for it up to wait, or
// until gone is closed (a nil gone: never).
func rollback(ctx context.Context, wait time.Duration, gone <-chan struct{}, undo func(ctx context.Context)) {
	select {
	case rollbackSlots <- struct{}{}:
	default:
		return
	}
	done := make(chan struct{})
	go func() {
		defer func() { <-rollbackSlots }()
		defer close(done)
		rctx, cancel := Detached(ctx)
		defer cancel()
		undo(rctx)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-gone: // the caller's time is up: it does not wait at all
	}
}

// Rollbacks is how many rollbacks are in flight in the process.
func Rollbacks() int { return len(rollbackSlots) }
