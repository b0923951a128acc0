package hold

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errLost = errors.New("lost")

func TestClockEndsOnceWithFirstCause(t *testing.T) {
	var k Clock
	k.Start(Config{Sent: time.Now(), TTL: time.Hour, Lost: errLost})
	done := k.Done()
	if k.Err() != nil || k.Ended() {
		t.Fatalf("fresh lease: Err = %v, Ended = %v", k.Err(), k.Ended())
	}
	released := errors.New("released")
	k.End(released)
	k.End(errLost)
	<-done
	if k.Err() != released {
		t.Errorf("Err = %v; want the first cause", k.Err())
	}
	k.Confirm(time.Now(), time.Hour) // an extension confirmed too late
	if !k.Ended() {
		t.Error("Confirm revived an ended lease")
	}
}

func TestClockLostAtSafeDeadline(t *testing.T) {
	var k Clock
	k.Start(Config{Sent: time.Now(), TTL: 20 * time.Millisecond, Lost: errLost})
	<-k.Done()
	if k.Err() != errLost {
		t.Errorf("Err = %v; want the Lost cause", k.Err())
	}
}

// TestLateAgreesWithClock: a grant is late exactly when a Clock started
// from it would be ended on arrival.
func TestLateAgreesWithClock(t *testing.T) {
	const ttl = time.Second
	for _, age := range []time.Duration{0, ttl / 2, ttl - Drift(ttl) - 50*time.Millisecond, ttl - Drift(ttl), ttl} {
		sent := time.Now().Add(-age)
		var k Clock
		k.Start(Config{Sent: sent, TTL: ttl, Lost: errLost})
		if ended, late := k.Ended(), Late(sent, ttl); ended != late {
			t.Errorf("request sent %v ago: Clock ended = %v, Late = %v; want the same", age, ended, late)
		}
	}
}

func TestZeroClockIsEnded(t *testing.T) {
	var k Clock
	if !k.Ended() || k.Err() == nil {
		t.Errorf("zero Clock: Ended = %v, Err = %v; want ended with an error", k.Ended(), k.Err())
	}
}

func TestWatchdogRenewsUntilRefused(t *testing.T) {
	var calls atomic.Int32
	var k Clock
	k.Start(Config{Sent: time.Now(), TTL: 300 * time.Millisecond, AutoExtend: true, Lost: errLost,
		Extend: func(context.Context, time.Duration) Outcome {
			switch calls.Add(1) {
			case 1:
				return Failed // retried, not lost
			case 2, 3, 4, 5, 6:
				return Renewed
			}
			return Refused
		}})
	<-k.Done()
	k.StopWatchdog()
	if n := calls.Load(); n != 7 {
		t.Errorf("extensions = %d; want 7: a failure retried, five renewals past the TTL, then the refusal", n)
	}
	if k.Err() != errLost {
		t.Errorf("Err = %v; want the Lost cause", k.Err())
	}
}

// TestWatchdogDueFromLastRenewal: a watchdog started for a grant whose
// reply was slow (or resumed after a pause) renews an interval after the
// request was sent, not a whole interval after it started.
func TestWatchdogDueFromLastRenewal(t *testing.T) {
	renewed := make(chan struct{}, 1)
	var k Clock
	k.Start(Config{Sent: time.Now().Add(-40 * time.Minute), TTL: time.Hour, AutoExtend: true, Lost: errLost,
		Extend: func(context.Context, time.Duration) Outcome {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return Renewed
		}})
	defer k.StopWatchdog()
	select {
	case <-renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal 40 minutes into a 1-hour lease; want one at once (due at 20)")
	}
}

// TestWatchdogSlowRenewalsKeepLease: renewals that are each confirmed
// only as their request times out (a store that answers at the last
// moment) keep the lease: the next renewal is due an interval after the
// last was sent, not after it returned. (Due after it returned, the
// second such renewal was confirmed on the safe deadline: lost at 1.3 TTLs.)
func TestWatchdogSlowRenewalsKeepLease(t *testing.T) {
	const ttl = 900 * time.Millisecond
	var calls atomic.Int32
	var k Clock
	k.Start(Config{Sent: time.Now(), TTL: ttl, AutoExtend: true, Lost: errLost,
		Extend: func(ctx context.Context, _ time.Duration) Outcome {
			calls.Add(1)
			<-ctx.Done()
			return Renewed
		}})
	select {
	case <-k.Done():
		t.Fatalf("lease lost (Err %v) after %d renewals, each confirmed as it timed out", k.Err(), calls.Load())
	case <-time.After(4 * ttl):
	}
	k.StopWatchdog()
	k.End(errors.New("released"))
}

// TestWatchdogPauseResumeStop: a paused watchdog stays stopped once
// StopWatchdog is called (goleak would see a run that ResumeWatchdog
// restarted), and nested pauses resume only at the last.
func TestWatchdogPauseResumeStop(t *testing.T) {
	var calls atomic.Int32
	var k Clock
	// A renewal is overdue from the start: a running watchdog makes one at
	// once.
	k.Start(Config{Sent: time.Now().Add(-40 * time.Minute), TTL: time.Hour, AutoExtend: true, Lost: errLost,
		Extend: func(context.Context, time.Duration) Outcome { calls.Add(1); return Failed }})
	k.PauseWatchdog()
	k.PauseWatchdog()
	k.ResumeWatchdog()
	n := calls.Load()
	time.Sleep(50 * time.Millisecond)
	if calls.Load() != n {
		t.Fatal("the watchdog renewed while one of two pauses was still on")
	}
	k.ResumeWatchdog()
	// Failing renewals are retried every few ms.
	redistest.Eventually(t, "a renewal after the last pause was lifted", func() bool { return calls.Load() != n })
	k.PauseWatchdog()
	k.StopWatchdog()
	k.ResumeWatchdog()
	k.End(errors.New("released"))
}
