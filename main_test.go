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
	// After failed dials to a killed server, go-redis keeps one goroutine
	// per pool probing the address once a second, even past Close; it is
	// the client's, not ours (as in lock's tests).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// nearTest is the near tier's config in this package's tests, given to
// every Cache with a near tier (withNear; newNearCache does it): trackers
// notice a silent connection, and an idle Cache, sooner; and a tracker
// stalled by the race detector on a loaded machine does not turn near
// hits that tests count into reads.
func nearTest() near.Config {
	return near.Config{Ping: 100 * time.Millisecond, Idle: time.Second, MaxLag: 300 * time.Millisecond}
}
