package redistest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// stallTick is how often a [Stalls] goroutine asks to run.
const stallTick = 5 * time.Millisecond

// Stalls measures how long the test process was not running a goroutine
// that asked to: on a loaded machine (CI's two cores beside CPU hogs) the
// whole process can stand still for hundreds of milliseconds, and a bound
// on how soon the library does something is then a bound on the machine.
// A test adds Stalls.Between to such a bound, so that the bound still
// fails the library's own lateness, never the machine's.
type Stalls struct {
	mu   sync.Mutex
	late []stall
}

// A stall is one wake-up of the meter's goroutine that came late by d,
// ending at end.
type stall struct {
	end time.Time
	d   time.Duration
}

// MeasureStalls starts measuring stalls until tb ends.
func MeasureStalls(tb testing.TB) *Stalls {
	s := &Stalls{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchStalls(ctx, stallTick, time.Millisecond, func(due, ran time.Time) {
			s.mu.Lock()
			s.late = append(s.late, stall{ran, ran.Sub(due)})
			s.mu.Unlock()
		})
	}()
	tb.Cleanup(func() { cancel(); <-done })
	return s
}

// WatchStalls calls f with each stall of the process longer than min,
// until ctx ends: a goroutine asks to run every tick, and a wake-up that
// comes more than min after it was due is a stall from due to ran.
func WatchStalls(ctx context.Context, tick, min time.Duration, f func(due, ran time.Time)) {
	t := time.NewTimer(tick)
	defer t.Stop()
	for {
		due := time.Now().Add(tick)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ran := time.Now(); ran.Sub(due) > min {
				f(due, ran)
			}
			t.Reset(tick)
		}
	}
}

// Between returns how long the process stalled between from and to: the
// sum of the stalls that overlap them, each cut to its part within.
func (s *Stalls) Between(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum time.Duration
	for _, l := range s.late {
		start, end := l.end.Add(-l.d), l.end
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		sum += max(0, end.Sub(start))
	}
	return sum
}
