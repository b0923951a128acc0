package redisutil

import (
	"context"
	"testing"
	"time"
)

// TestRollbackWaitsNotPastDeadline: a caller whose context is done does
// not wait for its rollback; one whose context is live waits for it, up to
// the grace. The grace is a minute here, so that waiting it shows.
func TestRollbackWaitsNotPastDeadline(t *testing.T) {
	defer func(g time.Duration) { RollbackGrace = g }(RollbackGrace)
	RollbackGrace = time.Minute
	unblock := make(chan struct{})
	defer waitRollbacks(t)
	defer close(unblock)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := timed(func() { Rollback(ctx, func(context.Context) { <-unblock }) }); d > time.Second {
		t.Errorf("rollback with a done context returned after %v; want at once", d)
	}

	const undo = 100 * time.Millisecond
	if d := timed(func() { Rollback(context.Background(), func(context.Context) { time.Sleep(undo) }) }); d < undo || d > 10*time.Second {
		t.Errorf("rollback with a live context returned after %v; want once its undo is done (%v)", d, undo)
	}
}

// waitRollbacks waits, for at most 10 s, until no rollback is in flight.
func waitRollbacks(t *testing.T) {
	for deadline := time.Now().Add(10 * time.Second); Rollbacks() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a rollback is still in flight after 10 s")
		}
	}
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}
