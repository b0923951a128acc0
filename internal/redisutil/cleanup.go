package redisutil

import (
	"context"
	"fmt"
	"time"
)

// CleanupTimeout bounds a round trip that must run after its caller may
// have left, or after its caller's context ended: a release, a fenced
// store, a rollback. Long enough for a loaded Redis, short enough that a
// stalled one does not pile such calls up.
const CleanupTimeout = 3 * time.Second

// Detached returns a context for cleanup work: it keeps ctx's values (a
// trace, say) but not its cancellation, and ends after CleanupTimeout.
func Detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
}

// Failed reports the failed round trip of op on the object called name, as
// pkg ("dogpile", "lock") says it. A done context wins, unwrapped, so that
// callers can compare it with ==, as with the standard library: the
// failure is then the caller's leaving, not Redis's.
func Failed(ctx context.Context, pkg, op, name string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return fmt.Errorf("%s: %s %q: %w", pkg, op, name, err)
}
