package hotkeys

import (
	"strconv"
	"testing"
)

// BenchmarkAdd is the cost of one recorded event: on one key (a hot key,
// as a sampled hit records it), and on a new key each time (a newcomer
// replaces the least-read key).
func BenchmarkAdd(b *testing.B) {
	b.Run("one-key", func(b *testing.B) {
		var s Summary
		b.ReportAllocs()
		for b.Loop() {
			s.Add("k", Counts{Reads: SampleRate})
		}
	})
	b.Run("new-keys", func(b *testing.B) {
		var s Summary
		keys := make([]string, 1<<16)
		for i := range keys {
			keys[i] = strconv.Itoa(i)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Add(keys[i%len(keys)], Counts{Reads: 1})
			i++
		}
	})
}

// BenchmarkSampled is the cost every hit pays: the sampling test.
func BenchmarkSampled(b *testing.B) {
	n := 0
	for i := uint64(0); b.Loop(); i++ {
		if Sampled(i) {
			n++
		}
	}
	_ = n
}
