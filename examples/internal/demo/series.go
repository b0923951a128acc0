package demo

import "time"

// A Series is a [Histogram] per step of time since a start: what the calls
// that began in each step took. Like a Histogram it merges across
// goroutines and processes and travels as JSON. The zero value is not
// usable; set Step.
type Series struct {
	Step    time.Duration `json:"step"`
	Buckets []Histogram   `json:"buckets,omitempty"`
}

// Record adds d to the step that holds at, a time since the start; a
// negative at counts in the first step.
func (s *Series) Record(at, d time.Duration) {
	i := max(0, int(at/s.Step))
	for len(s.Buckets) <= i {
		s.Buckets = append(s.Buckets, Histogram{})
	}
	s.Buckets[i].Record(d)
}

// Merge adds o's steps to s's, o's first step going into s's step shift:
// o started shift steps after s.
func (s *Series) Merge(o Series, shift int) {
	for i, h := range o.Buckets {
		j := max(0, i+shift)
		for len(s.Buckets) <= j {
			s.Buckets = append(s.Buckets, Histogram{})
		}
		s.Buckets[j].Merge(h)
	}
}
