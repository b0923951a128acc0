package redistest

import (
	"testing"
	"time"
)

// TestStallsBetween: a stall counts for its part within the span asked
// about, and none outside it.
func TestStallsBetween(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := &Stalls{late: []stall{
		{end: at(100), d: 50 * time.Millisecond},  // 50-100
		{end: at(300), d: 100 * time.Millisecond}, // 200-300
		{end: at(500), d: 10 * time.Millisecond},  // 490-500
	}}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 1000, 160 * time.Millisecond},
		{75, 250, 75 * time.Millisecond},
		{100, 200, 0},
		{400, 495, 5 * time.Millisecond},
		{600, 700, 0},
	} {
		if got := s.Between(at(c.from), at(c.to)); got != c.want {
			t.Errorf("Between(%d ms, %d ms) = %v; want %v", c.from, c.to, got, c.want)
		}
	}
}

// TestStallsMeasured: a meter started and ended with its test leaves no
// goroutine (goleak, in TestMain), and a span it did not see stall adds
// nothing much.
func TestStallsMeasured(t *testing.T) {
	s := MeasureStalls(t)
	from := time.Now()
	time.Sleep(50 * time.Millisecond)
	if d := s.Between(from, time.Now()); d > 50*time.Millisecond {
		t.Errorf("a 50 ms span stalled %v: more than itself", d)
	}
}
