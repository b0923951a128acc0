package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// TestTimelineLinesUpProcesses: steps are counted from the earliest
// process's start, and compute starts land in the step they began in.
func TestTimelineLinesUpProcesses(t *testing.T) {
	const origin = 1_000_000_000 // unix µs
	a := result{Start: origin, Timeline: demo.Series{Step: timelineStep}, Starts: [][]int64{{origin + 10_000}}}
	a.Timeline.Record(20*time.Millisecond, 2*time.Millisecond)
	b := result{Start: origin + 210_000, Timeline: demo.Series{Step: timelineStep}, Starts: [][]int64{{origin + 250_000, origin + 260_000}}}
	b.Timeline.Record(0, 100*time.Millisecond) // began 210 ms after a's start: step 2
	steps := timeline([]result{a, b})
	if len(steps) != 3 {
		t.Fatalf("timeline has %d steps; want 3: %+v", len(steps), steps)
	}
	if got := []int{steps[0].Computes, steps[1].Computes, steps[2].Computes}; !slices.Equal(got, []int{1, 0, 2}) {
		t.Errorf("computes per step = %v; want [1 0 2]", got)
	}
	if steps[0].Calls != 1 || steps[1].Calls != 0 || steps[2].Calls != 1 || steps[2].Max != 100*time.Millisecond {
		t.Errorf("steps = %+v; want one call in step 0, one of 100ms in step 2", steps)
	}
}

// TestPlotShowsEveryMode draws a made-up run: the picture parses, names
// every mode, has a bar per step with computes and the three latency lines.
func TestPlotShowsEveryMode(t *testing.T) {
	cfg := defaultConfig()
	var reps []modeReport
	for i, mode := range modes {
		m := modeReport{Mode: mode, ComputesPerExpiry: float64(4 - i)}
		for s := range 30 {
			st := step{Calls: 100, P50: time.Millisecond, P99: 5 * time.Millisecond, Max: 20 * time.Millisecond}
			if s%10 == 0 {
				st.Computes, st.Max = 4-i, 110*time.Millisecond
			}
			if s == 15 {
				st = step{} // no call began: the lines break
			}
			m.Timeline = append(m.Timeline, st)
		}
		reps = append(reps, m)
	}
	var b bytes.Buffer
	if _, err := drawPlot(cfg, "Redis", reps).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	c, err := demo.ReadSVG(b.Bytes())
	if err != nil {
		t.Fatalf("ReadSVG: %v", err)
	}
	for _, mode := range modes {
		if !slices.Contains(c.Texts, mode) {
			t.Errorf("picture lacks the mode %q; texts %q", mode, c.Texts)
		}
	}
	if got, want := c.Classes["computes"], 1+3*len(modes); got != want { // the legend's swatch, then 3 bars per mode
		t.Errorf("%d compute bars; want %d", got, want)
	}
	for _, q := range []string{"p50", "p99", "max"} {
		if got := c.Classes[q]; got != 2*len(modes) { // two segments each: step 15 breaks the line
			t.Errorf("%d %s lines; want %d", got, q, 2*len(modes))
		}
	}
	for _, label := range []string{"1ms", "100ms", "1s", "0s", "3s"} {
		if !slices.Contains(c.Texts, label) {
			t.Errorf("picture lacks the axis label %q; texts %q", label, c.Texts)
		}
	}
}

// TestPlotFlag runs the demo with -plot: the file it writes is a picture of
// the run's four modes.
func TestPlotFlag(t *testing.T) {
	t.Parallel()
	cfg := smallConfig("")
	cfg.Probe = "" // embedded: this checks the flag, not the library
	cfg.Compare = true
	cfg.JSON = false
	cfg.Duration = 400 * time.Millisecond
	cfg.Plot = filepath.Join(t.TempDir(), "run.svg")
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "wrote "+cfg.Plot) {
		t.Errorf("output does not name the picture:\n%s", out.String())
	}
	b, err := os.ReadFile(cfg.Plot)
	if err != nil {
		t.Fatal(err)
	}
	c, err := demo.ReadSVG(b)
	if err != nil {
		t.Fatalf("ReadSVG: %v", err)
	}
	for _, mode := range modes {
		if !slices.Contains(c.Texts, mode) {
			t.Errorf("picture lacks the mode %q", mode)
		}
	}
	if c.Classes["computes"] < 1+len(modes) || c.Classes["p99"] < len(modes) {
		t.Errorf("classes %v; want compute bars and a p99 line for every mode", c.Classes)
	}
}
