package benchmarks

import (
	"math/bits"
	"time"
)

// A hist is a latency histogram with about 1.5 % resolution (64 buckets per
// power of two of microseconds; exact below 64 µs), small enough to send
// from a child process as JSON however many calls it counted.
type hist struct {
	Counts []int64       `json:"counts"` // by bucket index
	Max    time.Duration `json:"max"`
	N      int64         `json:"n"`
}

// histSub is the number of buckets per power of two.
const histSub = 64

func histBucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < histSub {
		return int(us)
	}
	e := bits.Len64(us) - 7 // us>>e is in [64, 128)
	return (e+1)*histSub + int(us>>e) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) time.Duration {
	if i < histSub {
		return time.Duration(i) * time.Microsecond
	}
	e := i/histSub - 1
	lo := uint64(i%histSub+histSub) << e
	return time.Duration(lo+(uint64(1)<<e)/2) * time.Microsecond
}

func (h *hist) record(d time.Duration) {
	i := histBucket(d)
	if i >= len(h.Counts) {
		h.Counts = append(h.Counts, make([]int64, i+1-len(h.Counts))...)
	}
	h.Counts[i]++
	h.N++
	h.Max = max(h.Max, d)
}

func (h *hist) merge(o hist) {
	if len(o.Counts) > len(h.Counts) {
		h.Counts = append(h.Counts, make([]int64, len(o.Counts)-len(h.Counts))...)
	}
	for i, n := range o.Counts {
		h.Counts[i] += n
	}
	h.N += o.N
	h.Max = max(h.Max, o.Max)
}

// quantile returns the q-quantile (nearest rank; the maximum for q = 1), 0
// if empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	if q >= 1 {
		return h.Max
	}
	rank := int64(q*float64(h.N-1)) + 1
	var seen int64
	for i, n := range h.Counts {
		if seen += n; seen >= rank {
			return min(histValue(i), h.Max)
		}
	}
	return h.Max
}
