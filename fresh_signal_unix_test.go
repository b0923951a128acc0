//go:build unix

package dogpile

import (
	"os"
	"syscall"
	"testing"
)

// pause stops process p (SIGSTOP) until resume: a process frozen by the
// scheduler, a long GC pause or a VM migration, as far as the fleet can tell.
func pause(t *testing.T, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

func resume(t *testing.T, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}
