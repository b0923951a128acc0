package redistest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// sysProcAttr puts redis-server in its own process group, so that a kill also
// reaches any child it forked (BGSAVE), and has the kernel kill it when the
// thread that started it dies, so a crashed test binary leaves nothing behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalProcess sends sig to p's process group. After a SIGSTOP it waits
// until every thread of p is stopped: the kernel stops threads
// asynchronously, and a thread of a multi-threaded server (memcached's
// workers) could otherwise still answer a request sent just after.
func signalProcess(p *os.Process, sig signal) error {
	if err := syscall.Kill(-p.Pid, unixSignals[sig]); err != nil || sig != sigStop {
		return err
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if allStopped(p.Pid) {
			return nil
		}
	}
	return nil // best effort: the caller's own checks will tell
}

// allStopped reports whether every thread of pid is in the stopped state.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces, so look past its ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

var unixSignals = [...]syscall.Signal{sigKill: syscall.SIGKILL, sigStop: syscall.SIGSTOP, sigCont: syscall.SIGCONT}
