//go:build unix && !linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts redis-server in its own process group, so that a kill also
// reaches any child it forked (BGSAVE). Unlike on Linux, a crashed test binary
// can leave the server running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalProcess sends sig to p's process group.
func signalProcess(p *os.Process, sig signal) error {
	return syscall.Kill(-p.Pid, unixSignals[sig])
}

var unixSignals = [...]syscall.Signal{sigKill: syscall.SIGKILL, sigStop: syscall.SIGSTOP, sigCont: syscall.SIGCONT}
