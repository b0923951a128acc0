//go:build !unix

package dogpile

import (
	"os"
	"testing"
)

func pause(t *testing.T, _ *os.Process) { t.Skip("stopping a process needs SIGSTOP (unix)") }

func resume(t *testing.T, _ *os.Process) {}
