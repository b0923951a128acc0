package lock

import (
	"fmt"
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

// WithWithdrawWait sets how long a waiter of the lock that gave up waits
// for its withdrawal.
func WithWithdrawWait(d time.Duration) Option {
	return optionFunc(func(o *options) { o.withdrawWait = d })
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
