package redistest

// child.go runs the test binary again as child processes, for tests whose
// subject is several processes: a fleet sharing one Redis, a lock holder
// that crashes. The parent starts each child in a named mode
// ([StartChild]); the child's TestMain hands the process to that mode
// ([ChildMain]). They talk in lines over the child's stdin and stdout:
// "ready", "go", then whatever the mode says, and "result" with a JSON
// value. groupcache's http_test.go does the same with flags.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// childEnv tells a re-executed test binary that it is a child: "mode
// params", params being JSON. One variable, so that a mode's parameters
// are one Go value on both sides instead of a variable each.
const childEnv = "REDISTEST_CHILD"

// ChildTimeout is how long a [Child]'s parent waits for each of its lines
// (ready, a result) and for its exit, unless [Child.SetTimeout] says
// otherwise: a child that hangs fails the test with its stderr instead of
// holding it until go test's 10-minute timeout.
const ChildTimeout = time.Minute

// stderrTail is how much of a child's stderr a failure message quotes: the
// end, where a panic or a race report is.
const stderrTail = 8 << 10

// A Child is the test binary running as a child process, started by
// [StartChild]. Its methods that wait fail the test if the child exits
// first or does not answer within [ChildTimeout], and quote the end of its
// stderr. They must be called from the test's goroutine, one at a time.
type Child struct {
	mode    string
	p       *proc
	stdin   io.WriteCloser
	lines   chan string // the child's stdout, line by line; closed at EOF
	stderr  string      // the file that holds its stderr
	timeout time.Duration
}

// StartChild starts the test binary again in mode, with params (encoded as
// JSON) for the child to read with [Parent.Params]; nil sends none; env
// ("NAME=value") is added to its environment. The child must call
// [ChildMain] from TestMain. tb.Cleanup kills it.
func StartChild(tb testing.TB, mode string, params any, env ...string) *Child {
	tb.Helper()
	spec, err := json.Marshal(params)
	if err != nil {
		tb.Fatalf("redistest: child %s params: %v", mode, err)
	}
	bin, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	// Without ChildMain in TestMain, the child runs no test and exits
	// at once, instead of running the whole suite again.
	cmd := exec.Command(bin, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(append(os.Environ(), env...), childEnv+"="+mode+" "+string(spec))
	c := &Child{mode: mode, lines: make(chan string, 64), timeout: ChildTimeout}
	// stderr goes to a file, which the child writes directly and the
	// parent can read at any time, as a server's log.
	c.stderr = filepath.Join(tb.TempDir(), "stderr")
	errf, err := os.Create(c.stderr)
	if err != nil {
		tb.Fatal(err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	// stdout is a pipe of ours, not StdoutPipe: the waiting goroutine of
	// start would close that at exit, losing lines not read yet.
	out, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout = w
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	c.p, err = start(cmd)
	w.Close() // the child has its own copy
	if err != nil {
		out.Close()
		tb.Fatal(err)
	}
	go c.read(out)
	tb.Cleanup(func() {
		c.Kill()
		for range c.lines { // the reader ends at EOF
		}
	})
	return c
}

// StartChildren starts n children in mode with params and waits until each
// says it is ready ([Parent.Ready]); [Child.Go] lets each go. Tests that
// time their children start the clock after that: starting a process can
// take a second on a busy machine.
func StartChildren(tb testing.TB, n int, mode string, params any) []*Child {
	tb.Helper()
	kids := make([]*Child, n)
	for i := range kids {
		kids[i] = StartChild(tb, mode, params)
	}
	for _, k := range kids {
		k.Expect(tb, "ready")
	}
	return kids
}

// Go tells a ready child to go. Children told one after the other, once
// all are ready, start their work together.
func (c *Child) Go(tb testing.TB) {
	tb.Helper()
	c.Say(tb, "go")
}

func (c *Child) read(out *os.File) {
	defer close(c.lines)
	defer out.Close()
	r := bufio.NewReader(out) // no line limit: a result can be long
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		c.lines <- strings.TrimSuffix(line, "\n")
	}
}

// SetTimeout sets how long the parent waits for each of the child's lines
// and for its exit, for a child whose work takes longer than
// [ChildTimeout].
func (c *Child) SetTimeout(d time.Duration) { c.timeout = d }

// next returns the child's next line, failing the test if it exits first
// or says nothing within the timeout.
func (c *Child) next(tb testing.TB, want string) string {
	tb.Helper()
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok {
			c.fatalf(tb, "exited (%s) before saying %s", c.exit(), want)
		}
		return line
	case <-timer.C:
		c.fatalf(tb, "did not say %s within %v", want, c.timeout)
		return ""
	}
}

// Expect waits for the child's next line and fails the test unless it is
// want.
func (c *Child) Expect(tb testing.TB, want string) {
	tb.Helper()
	if line := c.next(tb, fmt.Sprintf("%q", want)); line != want {
		c.fatalf(tb, "said %q; want %q", line, want)
	}
}

// Result skips the child's lines up to its next result ([Parent.Result])
// and decodes that into v.
func (c *Child) Result(tb testing.TB, v any) {
	tb.Helper()
	for {
		if s, ok := strings.CutPrefix(c.next(tb, "its result"), "result "); ok {
			if err := json.Unmarshal([]byte(s), v); err != nil {
				c.fatalf(tb, "result %q: %v", s, err)
			}
			return
		}
	}
}

// Wait skips the child's remaining lines and waits for it to exit; the
// test fails unless it exits with status 0.
func (c *Child) Wait(tb testing.TB) {
	tb.Helper()
	timer := time.NewTimer(c.timeout)
	defer timer.Stop()
	for lines := c.lines; lines != nil; {
		select {
		case _, ok := <-lines:
			if !ok {
				lines = nil
			}
		case <-timer.C:
			c.fatalf(tb, "did not exit within %v", c.timeout)
		}
	}
	select {
	case <-c.p.done:
	case <-timer.C:
		c.fatalf(tb, "closed its stdout but did not exit within %v", c.timeout)
	}
	if st := c.p.cmd.ProcessState; !st.Success() {
		c.fatalf(tb, "exited (%s)", st)
	}
}

// Say writes line to the child's stdin, for [Parent.Scan].
func (c *Child) Say(tb testing.TB, line string) {
	tb.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.fatalf(tb, "write %q: %v", line, err)
	}
}

// Send writes v as one line of JSON to the child's stdin, for
// [Parent.Receive].
func (c *Child) Send(tb testing.TB, v any) {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	c.Say(tb, string(b))
}

// Kill kills the child with SIGKILL, a crash with no chance to clean up,
// and waits for it to exit. Killing a dead child does nothing.
func (c *Child) Kill() { c.p.kill() }

// Pause stops the child with SIGSTOP until [Child.Resume]: to the others,
// a process frozen by the scheduler, a long GC pause or a VM migration.
// Where SIGSTOP does not exist, Pause skips the test.
func (c *Child) Pause(tb testing.TB) { tb.Helper(); c.signal(tb, sigStop) }

// Resume continues a child stopped by [Child.Pause] with SIGCONT.
func (c *Child) Resume(tb testing.TB) { tb.Helper(); c.signal(tb, sigCont) }

func (c *Child) signal(tb testing.TB, sig signal) {
	tb.Helper()
	if err := c.p.signal(sig); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			tb.Skipf("redistest: cannot pause or resume a child here: %v", err)
		}
		c.fatalf(tb, "signal: %v", err)
	}
}

// exit describes how the child ended, once its stdout is closed: its exit
// status follows at once, unless it closed stdout and lives on.
func (c *Child) exit() string {
	select {
	case <-c.p.done:
		return c.p.cmd.ProcessState.String()
	case <-time.After(5 * time.Second):
		return "still running"
	}
}

func (c *Child) fatalf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	stderr := strings.TrimRight(readLog(c.stderr, 0), "\n")
	if n := len(stderr); n > stderrTail {
		stderr = "..." + stderr[n-stderrTail:]
	}
	tb.Fatalf("redistest: child %s (pid %d) %s; its stderr:\n%s", c.mode, c.p.cmd.Process.Pid, msg, stderr)
}
