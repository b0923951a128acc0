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

// madeUpRun is three waiters: two served in turn, one that gave up.
func madeUpRun(fenced bool) (config, report) {
	cfg := defaultConfig()
	const t0 = 1_000_000_000 // µs
	rep := report{Waiters: 3, Procs: 2, Fenced: fenced, Served: 2, TimedOut: 1, WaiterTable: []waiter{
		{ID: 2, Proc: 1, Served: true, Arrive: t0 + 10_000, Got: t0 + 300_000, Drink: 200 * time.Millisecond, Fence: 1795559604775364},
		{ID: 1, Proc: 0, Served: true, Arrive: t0, Got: t0 + 1_000, Drink: 299 * time.Millisecond, Fence: 1795559604775357},
		{ID: 3, Proc: 0, Arrive: t0 + 20_000, Got: t0 + 3_020_000, Wait: 3 * time.Second},
	}}
	return cfg, rep
}

func TestLanesShowEveryWaiter(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		cfg, rep := madeUpRun(fenced)
		var b bytes.Buffer
		if _, err := drawLanes(cfg, rep).WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		c, err := demo.ReadSVG(b.Bytes())
		if err != nil {
			t.Fatalf("ReadSVG: %v", err)
		}
		for _, name := range []string{"w01 p0", "w02 p1", "w03 p0"} {
			if !slices.Contains(c.Texts, name) {
				t.Errorf("fenced %v: picture lacks the lane %q; texts %q", fenced, name, c.Texts)
			}
		}
		// Each class once in the legend, then once per lane that has it.
		if c.Classes["waiting"] != 1+2 || c.Classes["drinking"] != 1+2 || c.Classes["gaveup"] != 1+1 {
			t.Errorf("fenced %v: classes %v; want 2 waits, 2 drinks and 1 giving up (plus the legend's)", fenced, c.Classes)
		}
		if has := slices.Contains(c.Texts, "1795559604775357"); has != fenced {
			t.Errorf("fenced %v: fence label shown = %v", fenced, has)
		}
		// Lanes go in arrival order, whatever the order of the table.
		if i, j := slices.Index(c.Texts, "w01 p0"), slices.Index(c.Texts, "w02 p1"); i > j {
			t.Errorf("lane w01 after w02: texts %q", c.Texts)
		}
	}
}

// TestBeerWaiterPlotFlag runs the demo with -plot: the file it writes is a
// picture of the run's waiters.
func TestBeerWaiterPlotFlag(t *testing.T) {
	t.Parallel()
	cfg := smallConfig("") // embedded: this checks the flag, not the lock
	cfg.JSON = false
	cfg.Plot = filepath.Join(t.TempDir(), "tap.svg")
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
	for i := 1; i <= cfg.Waiters; i++ {
		if !slices.ContainsFunc(c.Texts, func(s string) bool { return strings.HasPrefix(s, "w0"+string(rune('0'+i))+" ") }) {
			t.Errorf("picture lacks waiter %d's lane; texts %q", i, c.Texts)
		}
	}
	if c.Classes["drinking"] < 2 {
		t.Errorf("classes %v; want at least one drink besides the legend's", c.Classes)
	}
}
