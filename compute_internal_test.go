package dogpile

import (
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestEarlyGapFloor: the early-refresh gap is never below twice the last
// refresh's duration (times beta), unless capped at a third of the TTL.
func TestEarlyGapFloor(t *testing.T) {
	c := New[string](redistest.NopClient(t), WithEarlyRefresh(1.5))
	const took = 10 * time.Millisecond
	for range 1000 {
		if gap := c.earlyGap(took, time.Hour); gap < 30*time.Millisecond {
			t.Fatalf("earlyGap(%v) = %v; want at least 2 × took × beta = 30ms", took, gap)
		}
		if gap := c.earlyGap(took, 60*time.Millisecond); gap != 20*time.Millisecond {
			t.Fatalf("earlyGap(%v, ttl 60ms) = %v; want the cap, a third of the TTL", took, gap)
		}
	}
}
