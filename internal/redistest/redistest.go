// Package redistest starts private Redis servers for tests, so that no test ever
// touches a shared server such as the one on 127.0.0.1:6379.
//
// [Start] is the common case: one private redis-server per test, about 0.1 s to
// start, stopped by tb.Cleanup. [StartServer] returns the process itself for tests
// that kill, pause or restart Redis, and [StartCluster] starts a local Redis Cluster
// ([StartClusterReplicas] with replicas, for failover tests).
// [StartMemcached] starts a private memcached the same way, for lock/memcache;
// without memcached in $PATH it skips the test (naming the install command),
// or fails it when CI is set.
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		rdb := redistest.Start(t)
//		// use rdb; the server is killed when t ends
//	}
//
// # Environment
//
// If REDIS_ADDR is set, [Start] returns a client for that address instead of
// starting a server, and [StartServer] and [StartCluster] skip the test.
// If redis-server is not in $PATH, [Start] falls back to an embedded miniredis
// and [StartServer] and [StartCluster] skip the test; when CI is set, a missing
// redis-server fails the test instead.
//
// # Cleanup
//
// Every process is killed and waited for in tb.Cleanup. On Linux each
// redis-server also gets SIGKILL when the test binary dies, so a panic or a
// test timeout, which skip Cleanup, does not leave servers behind.
package redistest

import (
	"bufio"
	"bytes"
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

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

const (
	// installHint is the message for a missing redis-server.
	installHint = "redistest: redis-server not found; install it with: apt-get install -y redis-server"

	// startTimeout bounds how long a redis-server may take to answer PING.
	startTimeout = 10 * time.Second

	// pollInterval is the pause between readiness probes. A server starts in
	// tens of milliseconds, so polling often keeps tests fast.
	pollInterval = 2 * time.Millisecond

	// bindAttempts is how often a fresh port is tried when another process took
	// the one picked (the port is free when picked, but not reserved).
	bindAttempts = 5
)

// errAddrInUse reports that redis-server could not bind its port.
var errAddrInUse = errors.New("redistest: address already in use")

// Available reports whether redis-server is in $PATH.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Start returns a client for a private redis-server started with args; tb.Cleanup
// closes the client and kills the server.
//
// If REDIS_ADDR is set, Start returns a client for that address instead and does
// not flush it. If redis-server is not in $PATH and CI is unset, Start returns a
// client for an embedded miniredis (see [Embedded]) and logs that it did so; with
// CI set, a missing redis-server fails the test. In both cases args cannot be
// applied, so Start skips the test if any were given.
func Start(tb testing.TB, args ...string) *redis.Client {
	tb.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		if len(args) > 0 {
			tb.Skipf("redistest: REDIS_ADDR is set; cannot apply server args %q", args)
		}
		return newClient(tb, addr)
	}
	if !Available() && os.Getenv("CI") == "" {
		if len(args) > 0 {
			tb.Skipf("%s (the embedded fallback cannot apply server args %q)", installHint, args)
		}
		tb.Log(installHint + "; using an embedded miniredis instead")
		return Embedded(tb)
	}
	return StartServer(tb, args...).Client(tb)
}

// Embedded starts an in-process miniredis server and returns a client for it;
// tb.Cleanup closes both. Use it for tests that show the library works against
// miniredis; use [Start] for everything else.
func Embedded(tb testing.TB) *redis.Client {
	tb.Helper()
	m, err := miniredis.Run()
	if err != nil {
		tb.Fatalf("redistest: start miniredis: %v", err)
	}
	tb.Cleanup(m.Close)
	return newClient(tb, m.Addr())
}

// newClient returns a client for addr that tb.Cleanup closes.
func newClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// A Server is a private redis-server process started for one test. It listens
// on 127.0.0.1 and keeps its address across [Server.Restart].
//
// A Server is safe for concurrent use. The zero value is not usable; create one
// with [StartServer].
type Server struct {
	tb      testing.TB
	bin     string
	dir     string
	args    []string // the caller's extra args
	cluster bool     // cluster-enabled node, listening on busPort too
	// sentinel runs redis-server --sentinel, which needs a writable config
	// file of its own (sentinel.conf in dir) as its first argument.
	sentinel bool

	mu      sync.Mutex // guards everything below and serializes process control
	port    int
	busPort int
	p       *proc // nil when not started or killed
	logFrom int64 // offset in the log where the current process's output starts
}

// StartServer starts a private redis-server on a free loopback TCP port with
// --save "" --appendonly no, a fresh temporary --dir and then args, and waits until
// it answers PING. tb.Cleanup kills the server and removes its directory.
//
// StartServer fails the test with the server's output if it does not answer
// within 10 s. It skips the test if REDIS_ADDR is set, since the test would not
// run against that server. If redis-server is not in $PATH it skips the test, or
// fails it when CI is set.
func StartServer(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s := newServer(tb, false, args)
	if err := s.start(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// RequireServer skips the test, naming the install command, unless a
// private redis-server can be started: the binary is in $PATH and
// REDIS_ADDR is unset. With CI set, a missing binary fails the test
// instead. Call it on the test's own goroutine before starting servers
// from others: Skip and Fatal end only the goroutine that calls them.
func RequireServer(tb testing.TB) {
	tb.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		tb.Skipf("redistest: REDIS_ADDR=%s is set, but this test needs a private redis-server", addr)
	}
	if !Available() {
		if os.Getenv("CI") != "" {
			tb.Fatal(installHint)
		}
		tb.Skip(installHint)
	}
}

// newServer checks the environment and returns a Server that is not running yet
// but whose directory is already scheduled for removal.
func newServer(tb testing.TB, cluster bool, args []string) *Server {
	tb.Helper()
	RequireServer(tb)
	s, err := makeServer(cluster, args)
	if err != nil {
		tb.Fatal(err)
	}
	s.adopt(tb)
	return s
}

// makeServer returns a Server that is not running yet and belongs to no
// test: [Server.adopt] gives it to one, or [Server.discard] removes it.
func makeServer(cluster bool, args []string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	// A short directory under os.TempDir, not tb.TempDir: the path stays
	// readable in logs, and it is removed only after the server is dead.
	dir, err := os.MkdirTemp("", "rt")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	return &Server{bin: bin, dir: dir, args: args, cluster: cluster}, nil
}

// adopt makes s tb's: tb's Skip and Fatal report its failures, and
// tb.Cleanup kills it and removes its directory.
func (s *Server) adopt(tb testing.TB) {
	s.mu.Lock()
	s.tb = tb
	s.mu.Unlock()
	tb.Cleanup(s.discard)
}

// discard kills s and removes its directory.
func (s *Server) discard() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// start picks free ports and launches the server, trying fresh ports if another
// process takes the picked ones first.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range bindAttempts {
		var ports []int
		if ports, err = freePorts(1 + btoi(s.cluster)); err != nil {
			return err
		}
		s.port = ports[0]
		if s.cluster {
			s.busPort = ports[1]
		}
		if err = s.launch(); !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	return err
}

// Restart kills the server if it is running and starts it again on the same
// address with the same args, then waits until it answers PING. Data does not
// survive (nothing is saved), but a cluster node keeps its nodes.conf and so its
// identity. Restart fails the test if the server does not come back; call it
// from the goroutine running the test.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
	var err error
	for i := range bindAttempts {
		// The port is fixed now. Redis binds with SO_REUSEADDR, so only a
		// process that grabbed the port in the meantime can stop us; wait for
		// it to let go.
		if err = s.launch(); !errors.Is(err, errAddrInUse) {
			break
		}
		time.Sleep(time.Duration(i+1) * 50 * time.Millisecond)
	}
	if err != nil {
		s.tb.Fatalf("redistest: restart %s: %v", s.addr(), err)
	}
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr()
}

func (s *Server) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Client returns a new client for the server; tb.Cleanup closes it.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	return newClient(tb, s.Addr())
}

// Kill kills the server with SIGKILL and waits for it to exit. Killing a server
// that is not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kill()
}

func (s *Server) kill() {
	s.p.kill()
	s.p = nil
}

// Pause stops the server with SIGSTOP: it keeps its connections but answers
// nothing until [Server.Resume]. Pausing a server that is not running does
// nothing. Where SIGSTOP does not exist, Pause skips the test.
func (s *Server) Pause() { s.signal(sigStop) }

// Resume continues a server stopped by [Server.Pause] with SIGCONT.
func (s *Server) Resume() { s.signal(sigCont) }

func (s *Server) signal(sig signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.p.signal(sig); errors.Is(err, errors.ErrUnsupported) {
		s.tb.Skipf("redistest: cannot pause or resume redis-server here: %v", err)
	}
}

// A signal is a process-control action, mapped to a real signal per platform.
type signal int

const (
	sigKill signal = iota
	sigStop
	sigCont
)

// Running reports whether the server process is alive: started, and neither
// killed nor exited.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running()
}

func (s *Server) running() bool { return s.p.alive() }

// launch starts redis-server on s.port and waits until it answers. It is the
// only place that starts a process. It returns an error wrapping errAddrInUse if
// the port was taken, and an error carrying the server's output on any other
// failure. s.mu must be held.
func (s *Server) launch() error {
	var argv []string
	if s.sentinel {
		conf := filepath.Join(s.dir, "sentinel.conf")
		f, err := os.OpenFile(conf, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
		f.Close()
		argv = append(argv, conf, "--sentinel")
	}
	argv = append(argv,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
	)
	if s.cluster {
		argv = append(argv,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(s.busPort),
			// Without it a node learns its own IP only from a peer's MEET,
			// and a one-node cluster reports its slots on ":port".
			"--cluster-announce-ip", "127.0.0.1",
		)
	}
	argv = append(argv, s.args...)

	// The log is a file, not a pipe: the child writes to it directly, so no
	// goroutine copies output and it can be read at any time.
	logPath := filepath.Join(s.dir, "redis.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	if fi, err := log.Stat(); err == nil {
		s.logFrom = fi.Size()
	}
	p, err := spawn(s.bin, argv, s.dir, log)
	log.Close() // the child has its own copy
	if err != nil {
		return err
	}
	s.p = p

	addr, pid := s.addr(), p.cmd.Process.Pid
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		// The probe checks the pid as well, so a process that took the port
		// before us is not mistaken for our server.
		probeErr := probe(addr, pid)
		if probeErr == nil {
			return nil
		}
		select {
		case <-p.done:
			s.p = nil
			out := s.output()
			if strings.Contains(out, "Address already in use") {
				return fmt.Errorf("%w: redis-server on %s exited:\n%s", errAddrInUse, addr, out)
			}
			return fmt.Errorf("redistest: redis-server on %s exited before answering PING (%s):\n%s",
				addr, p.cmd.ProcessState, out)
		case <-deadline.C:
			s.kill()
			return fmt.Errorf("redistest: redis-server on %s did not answer PING within %v (last error: %v):\n%s",
				addr, startTimeout, probeErr, s.output())
		case <-tick.C:
		}
	}
}

// output returns what the current (or last) process wrote to stdout and stderr.
func (s *Server) output() string {
	return readLog(filepath.Join(s.dir, "redis.log"), s.logFrom)
}

// probe sends PING and INFO server to addr over a raw connection and reports
// whether a server with process id pid answered. A raw connection keeps the
// polling loop free of client pools and their goroutines.
func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Short: a foreign listener on the port may accept and never answer.
	if err := conn.SetDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	if line, err = r.ReadString('\n'); err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return fmt.Errorf("INFO: %q", strings.TrimSpace(line))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	want := []byte("\nprocess_id:" + strconv.Itoa(pid) + "\r")
	if !bytes.Contains(info, want) {
		return fmt.Errorf("another process answers on %s", addr)
	}
	return nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("redistest: find a free port: %w", err)
		}
		// Close only after all are picked, so the n ports differ.
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DeadAddr returns a loopback address where no Redis answers: a listener
// that closes every connection at once, held until the test ends so that no
// server started meanwhile (by this or another test binary) takes the port.
func DeadAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	tb.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}
