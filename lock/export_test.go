package lock

import (
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// WaitRollbacks returns once no background rollback is in flight.
func WaitRollbacks() {
	for redisutil.Rollbacks() > 0 {
		time.Sleep(time.Millisecond)
	}
}

// Rollbacks is how many background rollbacks are in flight.
func Rollbacks() int { return redisutil.Rollbacks() }

// HandoffGrace is how long a release reserves the lock for its oldest
// waiter.
const HandoffGrace = handoffGrace

// FenceLag is fenceLag.
const FenceLag = fenceLag

// FenceScripts are the sources that compare a counter with the clock.
func FenceScripts() map[string]string {
	return map[string]string{"fenceLib": fenceLib, "mutexAcquire's first lines": mutexAcquireHead}
}
