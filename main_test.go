package dogpile

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) {
	// The multi-process tests re-execute this binary as child processes.
	redistest.ChildMain(childModes())
	// Trackers notice a silent connection, and an idle Cache, sooner; and
	// a tracker stalled by the race detector on a loaded machine does not
	// turn near hits that tests count into reads.
	near.Ping, near.Idle, near.MaxLag = 100*time.Millisecond, time.Second, 300*time.Millisecond
	// After failed dials to a killed server, go-redis keeps one goroutine
	// per pool probing the address once a second, even past Close; it is
	// the client's, not ours (as in lock's tests).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
