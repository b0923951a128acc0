package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// memcachedHint is the message for a missing memcached.
const memcachedHint = "redistest: memcached not found; install it with: apt-get install -y memcached"

// memcachedMemoryMB is the private server's cache size: small, since tests
// store a few keys, and well above memcached's minimum.
const memcachedMemoryMB = "64"

// MemcachedAvailable reports whether memcached is in $PATH.
func MemcachedAvailable() bool {
	_, err := exec.LookPath("memcached")
	return err == nil
}

// A Memcached is a private memcached process started for one test, on
// 127.0.0.1 with UDP off. It is safe for concurrent use. The zero value is
// not usable; create one with [StartMemcached].
type Memcached struct {
	tb  testing.TB // nil when started by RunMemcached
	bin string
	dir string

	mu      sync.Mutex // guards everything below and serializes process control
	port    int
	p       *proc // nil when not started or killed
	logFrom int64
}

// StartMemcached starts a private memcached on a free loopback TCP port and
// waits until it answers; tb.Cleanup kills it. If memcached is not in $PATH
// it skips the test naming the install command, or fails it when CI is set.
func StartMemcached(tb testing.TB) *Memcached {
	tb.Helper()
	if !MemcachedAvailable() {
		if os.Getenv("CI") != "" {
			tb.Fatal(memcachedHint)
		}
		tb.Skip(memcachedHint)
	}
	m, err := RunMemcached()
	if m != nil {
		m.tb = tb
		tb.Cleanup(m.Stop)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// RunMemcached is [StartMemcached] for a TestMain, where there is no
// testing.TB (runnable examples need a server too): the caller must call
// [Memcached.Stop]. A missing memcached is an error that names the install
// command.
func RunMemcached() (*Memcached, error) {
	bin, err := exec.LookPath("memcached")
	if err != nil {
		return nil, errors.New(memcachedHint)
	}
	dir, err := os.MkdirTemp("", "mc")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	m := &Memcached{bin: bin, dir: dir}
	m.mu.Lock()
	defer m.mu.Unlock()
	for range bindAttempts {
		var ports []int
		if ports, err = freePorts(1); err != nil {
			break
		}
		m.port = ports[0]
		if err = m.launch(); !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return m, err
}

// Stop kills the server and removes its directory.
func (m *Memcached) Stop() {
	m.Kill()
	_ = os.RemoveAll(m.dir)
}

// Addr returns the server's address, "127.0.0.1:port".
func (m *Memcached) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
}

// Client returns a new gomemcache client for the server; tb.Cleanup closes
// its connections.
func (m *Memcached) Client(tb testing.TB) *memcache.Client {
	c := memcache.New(m.Addr())
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill kills the server with SIGKILL and waits for it to exit. Killing a
// server that is not running does nothing.
func (m *Memcached) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.p.kill()
	m.p = nil
}

// Pause stops the server with SIGSTOP: it keeps its connections but answers
// nothing until [Memcached.Resume]. Where SIGSTOP does not exist, Pause
// skips the test.
func (m *Memcached) Pause() { m.signal(sigStop) }

// Resume continues a server stopped by [Memcached.Pause].
func (m *Memcached) Resume() { m.signal(sigCont) }

func (m *Memcached) signal(sig signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.p.signal(sig); errors.Is(err, errors.ErrUnsupported) && m.tb != nil {
		m.tb.Skipf("redistest: cannot pause or resume memcached here: %v", err)
	}
}

// launch starts memcached on m.port and waits until it answers as itself.
// m.mu must be held.
func (m *Memcached) launch() error {
	argv := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(m.port), "-U", "0", "-m", memcachedMemoryMB}
	if os.Geteuid() == 0 {
		argv = append(argv, "-u", "root") // memcached refuses to run as root without it
	}
	logPath := filepath.Join(m.dir, "memcached.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	if fi, err := log.Stat(); err == nil {
		m.logFrom = fi.Size()
	}
	p, err := spawn(m.bin, argv, m.dir, log)
	log.Close()
	if err != nil {
		return err
	}
	m.p = p
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		probeErr := probeMemcached(addr, p.cmd.Process.Pid)
		if probeErr == nil {
			return nil
		}
		select {
		case <-p.done:
			m.p = nil
			out := readLog(logPath, m.logFrom)
			if strings.Contains(out, "Address already in use") {
				return fmt.Errorf("%w: memcached on %s exited:\n%s", errAddrInUse, addr, out)
			}
			return fmt.Errorf("redistest: memcached on %s exited before answering (%s):\n%s", addr, p.cmd.ProcessState, out)
		case <-deadline.C:
			p.kill()
			m.p = nil
			return fmt.Errorf("redistest: memcached on %s did not answer within %v (last error: %v):\n%s",
				addr, startTimeout, probeErr, readLog(logPath, m.logFrom))
		case <-tick.C:
		}
	}
}

// probeMemcached asks addr for its stats and reports whether the memcached
// with process id pid answered, so that a process that took the port
// first is not mistaken for ours.
func probeMemcached(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "stats\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	want := "STAT pid " + strconv.Itoa(pid) + "\r\n"
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		switch {
		case line == want:
			return nil
		case line == "END\r\n":
			return fmt.Errorf("another process answers on %s", addr)
		case !strings.HasPrefix(line, "STAT "):
			return fmt.Errorf("stats: %q", strings.TrimSpace(line))
		}
	}
}

// readLog returns what a process wrote to path from offset from on.
func readLog(path string, from int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no output: %v)", err)
	}
	if from <= int64(len(b)) {
		b = b[from:]
	}
	if len(b) == 0 {
		return "(no output)"
	}
	return string(b)
}
