package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
)

// A proc is a process started by start: a server, or a child (child.go).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and been waited for
}

// spawn starts bin with argv in dir, its output going to log.
func spawn(bin string, argv []string, dir string, log *os.File) (*proc, error) {
	cmd := exec.Command(bin, argv...)
	cmd.Dir = dir
	cmd.Stdout = log
	cmd.Stderr = log
	return start(cmd)
}

// start starts cmd in a process group of its own (see sysProcAttr).
//
// One goroutine per process starts it and waits for it, so done tells
// whether it is alive. The goroutine stays on its OS thread: on Linux the
// child's parent-death signal fires when the thread that forked it exits,
// so the thread must outlive the child. The goroutine ends when the process
// does, which the caller's kill guarantees by the end of the test.
func start(cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = sysProcAttr()
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("redistest: start %s: %w", cmd.Path, err)
	}
	return &proc{cmd: cmd, done: done}, nil
}

// kill kills the process with SIGKILL and waits for it to exit. A nil or
// dead proc is left alone.
func (p *proc) kill() {
	if p == nil {
		return
	}
	select {
	case <-p.done:
	default:
		_ = signalProcess(p.cmd.Process, sigKill)
		<-p.done
	}
}

// alive reports whether the process was started and has not exited.
func (p *proc) alive() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to a live process; a nil or dead proc ignores it.
func (p *proc) signal(sig signal) error {
	if !p.alive() {
		return nil
	}
	return signalProcess(p.cmd.Process, sig)
}
