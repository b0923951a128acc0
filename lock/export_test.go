package lock

import (
	"fmt"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// WaitRollbacks returns once no background rollback is in flight. Each
// rollback is bounded (redisutil.CleanupTimeout), so one still in flight
// after redistest.EventuallyWithin is a bug: WaitRollbacks then panics,
// naming it, instead of hanging until go test's timeout. (It takes no
// testing.TB, for callers that have none at hand.)
func WaitRollbacks() {
	if !redistest.Within(redistest.EventuallyWithin, func() bool { return redisutil.Rollbacks() == 0 }) {
		panic(fmt.Sprintf("lock: %d background rollbacks still in flight after %v", redisutil.Rollbacks(), redistest.EventuallyWithin))
	}
}

// Rollbacks is how many background rollbacks are in flight.
func Rollbacks() int { return redisutil.Rollbacks() }

// HandoffGrace is how long a release reserves the lock for its oldest
// waiter.
const HandoffGrace = handoffGrace

// SetWithdrawWait sets how long a waiter that gave up waits for its
// withdrawal, until tb's end.
func SetWithdrawWait(tb testing.TB, d time.Duration) {
	old := withdrawWait
	withdrawWait = d
	tb.Cleanup(func() { withdrawWait = old })
}

// RedlockScript names the Redlock script a command's first arguments
// (EVALSHA's hash, or EVAL's source) run: "acquire" or "bar", else "".
func RedlockScript(arg any) string {
	switch arg {
	case redlockAcquire.Hash(), redlockAcquireSrc:
		return "acquire"
	case redlockBar.Hash(), redlockBarSrc:
		return "bar"
	}
	return ""
}
