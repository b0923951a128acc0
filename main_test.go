package dogpile

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The multi-process tests re-execute this binary as child processes.
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	// Trackers notice a silent connection, and an idle Cache, sooner.
	nearPing, nearIdle = 100*time.Millisecond, time.Second
	goleak.VerifyTestMain(m)
}
