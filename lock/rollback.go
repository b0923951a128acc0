package lock

import (
	"context"
	"errors"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

// releaseLater rolls back token's acquire of h in the background (see
// redisutil.Rollback: the cache undoes its lost requests the same way).
func releaseLater(ctx context.Context, h holder, token string) { releaseAfter(ctx, h, token, nil) }

// releaseAfter is releaseLater for an acquire that failed with err. One
// whose caller left it in flight in a batch (see roundtrip.InFlight) is released
// once its batch has been answered: sent meanwhile, on the other pipeline
// of its lane or on a connection of its own, the release could reach Redis
// first, find nothing, and leave the lock the acquire then took held for a
// whole TTL. A batch still unanswered when the rollback's time is up is
// left to the TTL.
func releaseAfter(ctx context.Context, h holder, token string, err error) {
	var f *roundtrip.InFlight
	errors.As(err, &f)
	redisutil.Rollback(ctx, func(ctx context.Context) {
		if f != nil {
			select {
			case <-f.Done:
			case <-ctx.Done():
				return
			}
		}
		_, _ = h.release(ctx, token)
	})
}

// leftBehind reports whether an acquire that failed with err may have left
// something in Redis to undo. Not when the client's circuit turned its last
// attempt away (MayHaveRun knows ErrUnavailable): Redis is known to be
// unreachable, so a rollback would only hold one of the slots for its whole
// timeout, and what an earlier attempt of the wait left (a place in a
// queue) expires within one TTL.
func leftBehind(err error) bool { return redisutil.MayHaveRun(err) }

// withdrawWait bounds how long a blocking acquire that gives up waits for
// its withdrawal (see withdraw), past its deadline if need be: one round
// trip on a busy machine, a fifth of the 50 ms past a deadline that
// TestDeadlineHoldsWhileRedisPaused allows (twice as long made that test
// go past it beside CPU-bound processes: bench/HISTORY.md, issue 43). A
// test lengthens one lock's (options.withdrawWait).
const withdrawWait = 10 * time.Millisecond

// withdraw takes back the claim of a waiter that gave up, with undo: its
// ticket on a plain mutex, its place in a queue, a waiting writer's hold
// on new readers. Unlike a rollback, the caller waits for it even once its
// context is done, up to withdrawWait, so that when Redis answers within
// one round trip the claim is gone before Lock returns: the holder's
// release right after must not reserve the lock for, or wake, a waiter
// that has left, while a TryLock finds it taken. It does not wait while
// the client's circuit is open: Redis was found down, no round trip comes
// back in time. Past withdrawWait the withdrawal goes on in the background
// (bounded, see redisutil.Rollback), and a claim it never takes back
// lapses by itself (a reservation after the hand-off grace, a place in a
// queue after one TTL).
func (o *options) withdraw(ctx context.Context, undo func(ctx context.Context)) {
	wait := o.withdrawWait
	if o.breaker != nil && o.breaker.Open() {
		wait = 0
	}
	redisutil.RollbackWithin(ctx, wait, undo)
}
