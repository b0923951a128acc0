package main

import (
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// timelineStep is the width of one step of a mode's timeline: short enough
// to show each expiry (a TTL is 1 s by default, a compute 100 ms) on its own.
const timelineStep = 100 * time.Millisecond

// A step is one timelineStep of a mode's run, summed over its processes:
// the computes that started in it and what the calls that began in it took.
type step struct {
	Computes int           `json:"computes"`
	Calls    int64         `json:"calls"`
	P50      time.Duration `json:"latency_p50_ns"`
	P99      time.Duration `json:"latency_p99_ns"`
	Max      time.Duration `json:"latency_max_ns"`
}

// timeline lines up the processes' timelines and compute starts on the
// earliest process's start. The workers start together, so they differ by
// the few milliseconds their start signal took.
func timeline(results []result) []step {
	if len(results) == 0 {
		return nil
	}
	origin := results[0].Start
	for _, r := range results {
		origin = min(origin, r.Start)
	}
	stepUS := timelineStep.Microseconds()
	series := demo.Series{Step: timelineStep}
	var computes []int
	for _, r := range results {
		series.Merge(r.Timeline, int((r.Start-origin+stepUS/2)/stepUS))
		for _, key := range r.Starts {
			for _, at := range key {
				i := max(0, int((at-origin)/stepUS))
				for len(computes) <= i {
					computes = append(computes, 0)
				}
				computes[i]++
			}
		}
	}
	steps := make([]step, max(len(series.Buckets), len(computes)))
	for i := range steps {
		if i < len(computes) {
			steps[i].Computes = computes[i]
		}
		if i < len(series.Buckets) {
			h := &series.Buckets[i]
			steps[i].Calls, steps[i].P50, steps[i].P99, steps[i].Max = h.N, h.Quantile(0.5), h.Quantile(0.99), h.Max
		}
	}
	return steps
}
