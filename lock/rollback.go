package lock

import (
	"context"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// releaseLater rolls back token's acquire of h in the background (see
// redisutil.Rollback: the cache undoes its lost requests the same way).
func releaseLater(ctx context.Context, h holder, token string) {
	redisutil.Rollback(ctx, func(ctx context.Context) { _, _ = h.release(ctx, token) })
}

// leftBehind reports whether an acquire that failed with err may have left
// something in Redis to undo. Not when the client's circuit turned its last
// attempt away (MayHaveRun knows ErrUnavailable): Redis is known to be
// unreachable, so a rollback would only hold one of the slots for its whole
// timeout, and what an earlier attempt of the wait left (a place in a
// queue) expires within one TTL.
func leftBehind(err error) bool { return redisutil.MayHaveRun(err) }
