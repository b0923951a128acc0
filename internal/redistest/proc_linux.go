package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr puts redis-server in its own process group, so that a kill also
// reaches any child it forked (BGSAVE), and has the kernel kill it when the
// thread that started it dies, so a crashed test binary leaves nothing behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalProcess sends sig to p's process group.
func signalProcess(p *os.Process, sig signal) error {
	return syscall.Kill(-p.Pid, unixSignals[sig])
}

var unixSignals = [...]syscall.Signal{sigKill: syscall.SIGKILL, sigStop: syscall.SIGSTOP, sigCont: syscall.SIGCONT}
