//go:build !unix

package redistest

import (
	"errors"
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalProcess kills p; stopping and continuing a process are unsupported.
func signalProcess(p *os.Process, sig signal) error {
	if sig == sigKill {
		return p.Kill()
	}
	return errors.ErrUnsupported
}
