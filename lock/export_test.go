package lock

import "time"

// WaitRollbacks returns once no background rollback is in flight.
func WaitRollbacks() {
	for len(rollbackSlots) > 0 {
		time.Sleep(time.Millisecond)
	}
}
