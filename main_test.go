package dogpile_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) {
	// The multi-process tests re-execute this binary as child processes.
	redistest.ChildMain(childModes())
	// Four parallel tests at once, not GOMAXPROCS (2 here): they wait on
	// servers of their own far more than they compute (see
	// redistest.WaitingParallel).
	redistest.WaitingParallel(4)
	// WithSpareClusters: StartCluster takes a cluster joined while
	// earlier tests ran, instead of waiting out a fresh one's 2 s.
	// After failed dials to a killed server, go-redis keeps one goroutine
	// per pool probing the address once a second, even past Close; it is
	// the client's, not ours (as in lock's tests).
	goleak.VerifyTestMain(redistest.WithSpareClusters(m), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
