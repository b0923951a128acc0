package lock

import "time"

// WaitRollbacks returns once no background rollback is in flight.
func WaitRollbacks() {
	for len(rollbackSlots) > 0 {
		time.Sleep(time.Millisecond)
	}
}

// Rollbacks is how many background rollbacks are in flight.
func Rollbacks() int { return len(rollbackSlots) }

// HandoffGrace is how long a release reserves the lock for its oldest
// waiter.
const HandoffGrace = handoffGrace
