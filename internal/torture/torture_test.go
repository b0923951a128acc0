package torture

import (
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

var (
	seedFlag     = flag.Uint64("torture.seed", 0, "replay the schedule of this seed (0: draw a new one, printed in the log)")
	durationFlag = flag.Duration("torture.duration", 0, "how long faults are injected on each topology (0: 15s, 4s with -short)")
	keepFlag     = flag.String("torture.keep", "", "save each run's history in this directory")
	historyFlag  = flag.String("torture.history", "", "check this saved history (TestCheckSaved)")
	strictFlag   = flag.Bool("torture.strict", false, "fail on the violations of known defects too")
)

const (
	// ciDuration keeps the whole test, both topologies in parallel with
	// their setup, within a minute.
	ciDuration    = 15 * time.Second
	shortDuration = 4 * time.Second
)

func TestMain(m *testing.M) {
	redistest.ChildMain(ChildModes())
	goleak.VerifyTestMain(m)
}

// TestTorture runs the workload under random faults on a server and on a
// cluster with replicas, and checks every rule of the package doc on the
// history.
func TestTorture(t *testing.T) {
	redistest.RequireServer(t)
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	d := *durationFlag
	if d == 0 {
		d = ciDuration
		if testing.Short() {
			d = shortDuration
		}
	}
	for _, topology := range []string{Server, Cluster} {
		t.Run(topology, func(t *testing.T) {
			t.Parallel()
			Run{Seed: seed, Topology: topology, Duration: d, Keep: *keepFlag, Strict: *strictFlag}.Go(t)
		})
	}
}

// TestCheckSaved checks a history saved by -torture.keep again, for work
// on the checker.
func TestCheckSaved(t *testing.T) {
	if *historyFlag == "" {
		t.Skip("no -torture.history")
	}
	h, err := LoadHistory(*historyFlag)
	if err != nil {
		t.Fatal(err)
	}
	v := Check(h)
	t.Logf("%s", Figures(h, nil, 0, v))
	for _, v := range v.Violations {
		if v.Known == "" || *strictFlag {
			t.Errorf("%s", Excerpt(h, v))
		}
	}
}
