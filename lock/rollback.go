package lock

import (
	"context"
	"errors"
	"time"
)

// A rollback undoes what a request may have done in Redis although its
// caller saw it fail: an acquire whose reply never came (a timeout, a
// cancelled context, a broken connection) may have taken the lock, and
// leaving it would block everyone for a whole TTL.
//
// Rollbacks run in the background, so that no call outlives its context
// waiting for one while Redis is slow or stopped: a caller whose context
// is still live waits for its rollback at most rollbackGrace, which a
// healthy Redis needs a fraction of, so that normally the state is clean
// when the call returns (say, after a broken connection); a caller whose
// context is done does not wait at all. (Waiting the grace after a
// deadline made a timed-out Mutex.Lock return 6-7 ms late and a
// Semaphore.Acquire, with two rollbacks, 12-13 ms, measured on an idle
// machine; more on a busy one.) They are
// bounded twice: each by rollbackTimeout, and at most maxRollbacks at a
// time per process. Past that many Redis is clearly not answering, and
// further rollbacks are dropped: what they would undo expires within one
// TTL anyway.
const (
	rollbackTimeout = 3 * time.Second
	maxRollbacks    = 256
)

var rollbackGrace = 5 * time.Millisecond // a variable for a test to lengthen

var rollbackSlots = make(chan struct{}, maxRollbacks)

// rollback runs undo in the background on a context detached from ctx's
// cancellation (it keeps ctx's values), bounded by rollbackTimeout, and
// waits for it at most rollbackGrace, and not once ctx is done.
func rollback(ctx context.Context, undo func(ctx context.Context)) {
	select {
	case rollbackSlots <- struct{}{}:
	default:
		return
	}
	done := make(chan struct{})
	go func() {
		defer func() { <-rollbackSlots }()
		defer close(done)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		undo(rctx)
	}()
	t := time.NewTimer(rollbackGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done(): // the caller's time is up: it does not wait at all
	}
}

// releaseLater rolls back token's acquire of h in the background.
func releaseLater(ctx context.Context, h holder, token string) {
	rollback(ctx, func(ctx context.Context) { _, _ = h.release(ctx, token) })
}

// leftBehind reports whether an acquire that failed with err may have left
// something in Redis to undo. Not when the client's circuit turned it away:
// Redis is known to be unreachable, so a rollback would only hold one of
// the slots for its whole timeout, and what an earlier attempt of the
// wait left (a place in a queue) expires within one TTL.
func leftBehind(err error) bool {
	return err != nil && !errors.Is(err, ErrUnavailable)
}
