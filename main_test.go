package dogpile

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The multi-process tests re-execute this binary as child processes.
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	goleak.VerifyTestMain(m)
}
