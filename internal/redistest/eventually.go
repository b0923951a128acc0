package redistest

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// EventuallyWithin is how long Eventually waits for its condition: long
// enough for a failover or a restart on a loaded 2-core machine, short
// enough that a condition that never comes fails the test with a message
// instead of hanging until go test's 10-minute timeout.
const EventuallyWithin = 10 * time.Second

const (
	eventuallyStep = 2 * time.Millisecond  // between two checks of a test's condition
	clusterStep    = 10 * time.Millisecond // between two looks at a cluster's or sentinel's state
)

var errNotYet = errors.New("not yet")

// Eventually checks cond until it reports true, and fails the test with
// "timed out waiting for what" if it has not after [EventuallyWithin]. It
// calls tb.Fatalf, so it must run on the test's goroutine.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if !Within(EventuallyWithin, cond) {
		tb.Fatalf("timed out waiting for %s (%v)", what, EventuallyWithin)
	}
}

// Collected runs the garbage collector until cond holds (what a test
// dropped is gone: weak pointers cleared, a map's entries removed by
// cleanups), and fails the test as Eventually does if it has not after
// [EventuallyWithin].
func Collected(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Eventually(tb, what, func() bool {
		runtime.GC()
		return cond()
	})
}

// Within reports whether cond held within d, checking it every few
// milliseconds: Eventually's check, for code that decides itself what a
// timeout means (a goroutine other than the test's, or a condition whose
// absence is the expected outcome).
func Within(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return poll(ctx, eventuallyStep, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}
