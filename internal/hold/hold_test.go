package hold

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errLost = errors.New("lost")

func TestBackoffStaysWithinBounds(t *testing.T) {
	b := NewBackoff(4*time.Millisecond, 32*time.Millisecond)
	bound := 4 * time.Millisecond
	for range 100 {
		if d := b.Next(); d < time.Millisecond || d >= bound+time.Millisecond {
			t.Fatalf("wait %v outside [1ms, %v)", d, bound+time.Millisecond)
		}
		bound = min(2*bound, 32*time.Millisecond)
	}
}

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
