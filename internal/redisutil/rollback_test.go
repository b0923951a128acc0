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

// TestRollbackWithinWaitsPastDeadline: RollbackWithin waits for its undo
// whether or not the caller's context is done, up to its bound, and then
// lets the undo go on in the background.
func TestRollbackWithinWaitsPastDeadline(t *testing.T) {
	unblock := make(chan struct{})
	defer waitRollbacks(t)
	defer close(unblock)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const undo = 100 * time.Millisecond
	if d := timed(func() { RollbackWithin(ctx, time.Minute, func(context.Context) { time.Sleep(undo) }) }); d < undo || d > 10*time.Second {
		t.Errorf("RollbackWithin with a done context returned after %v; want once its undo is done (%v)", d, undo)
	}
	const bound = 50 * time.Millisecond
	var ran bool
	if d := timed(func() {
		RollbackWithin(ctx, bound, func(context.Context) { <-unblock; ran = true })
	}); d < bound || d > 10*time.Second {
		t.Errorf("RollbackWithin of a stuck undo returned after %v; want after its bound, %v", d, bound)
	}
	if Rollbacks() != 1 || ran {
		t.Errorf("%d rollbacks in flight (ran %v); want the stuck undo still running", Rollbacks(), ran)
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
