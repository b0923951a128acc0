package dogpile

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A child is the test binary re-executed in one mode of childMain.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout, line by line; closed at EOF
}

func startChild(t *testing.T, mode string, addrs []string, prefix string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, addrsEnv+"="+strings.Join(addrs, ","), prefixEnv+"="+prefix)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// expect waits for the child to print want; it fails the test if the child
// prints anything else first, exits, or takes a minute.
func (c *child) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok || line != want {
			t.Fatalf("child printed %q (open %v); want %q", line, ok, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("child did not print %q within a minute", want)
	}
}

func (c *child) result(t *testing.T) childResult {
	t.Helper()
	var res childResult
	c.decode(t, &res)
	return res
}

// decode reads the child's output to its end and decodes its last result
// line into res; the child must exit cleanly.
func (c *child) decode(t *testing.T, res any) {
	t.Helper()
	for line := range c.lines {
		if s, ok := strings.CutPrefix(line, "result "); ok {
			if err := json.Unmarshal([]byte(s), res); err != nil {
				t.Fatalf("child result %q: %v", s, err)
			}
		}
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

// say writes a line to the child's stdin ("go", or one a mode waits for).
func (c *child) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatalf("write to child: %v", err)
	}
}

// goChildren starts n children in mode, waits until each is ready, and
// lets them go together.
func goChildren(t *testing.T, n int, mode string, addrs []string, prefix string, env ...string) []*child {
	t.Helper()
	kids := readyChildren(t, n, mode, addrs, prefix, env...)
	letGo(t, kids)
	return kids
}

// readyChildren starts n children in mode and waits until each is ready
// (started, connected): a test that times its children starts the clock
// after that, since starting a process can take a second on a busy machine.
func readyChildren(t *testing.T, n int, mode string, addrs []string, prefix string, env ...string) []*child {
	t.Helper()
	kids := make([]*child, n)
	for i := range kids {
		kids[i] = startChild(t, mode, addrs, prefix, env...)
	}
	for _, k := range kids {
		k.expect(t, "ready")
	}
	return kids
}

// letGo tells ready children to go.
func letGo(t *testing.T, kids []*child) {
	t.Helper()
	for _, k := range kids {
		k.say(t, "go")
	}
}

// runChildren starts n children in mode (with env), lets them go together,
// and returns their results.
func runChildren(t *testing.T, n int, mode string, addrs []string, prefix string, env ...string) []childResult {
	t.Helper()
	kids := goChildren(t, n, mode, addrs, prefix, env...)
	res := make([]childResult, n)
	for i, k := range kids {
		res[i] = k.result(t)
	}
	return res
}

func computesPerKey(t *testing.T, rdb redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), prefix+"computes").Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMultiProcessStampede: 4 processes × 50 goroutines fetch one absent
// key whose compute takes 100 ms: exactly one compute in the fleet.
func TestMultiProcessStampede(t *testing.T) {
	for _, b := range []string{"redis", "cluster"} {
		t.Run(b, func(t *testing.T) {
			addrs, rdb := fleetBackend(t, b)
			res := runChildren(t, 4, "one", addrs, "mp:")
			for i, r := range res {
				if r.Values != 50 || len(r.Errors) > 0 {
					t.Errorf("child %d: %d good values, errors %q; want 50, none", i, r.Values, r.Errors)
				}
			}
			if got := computesPerKey(t, rdb, "mp:"); len(got) != 1 || got["k"] != "1" {
				t.Errorf("computes = %v; want exactly one (k: 1)", got)
			}
			var poll uint64
			for _, r := range res {
				poll += r.Stats.PollWakeups
			}
			if poll != 0 {
				t.Errorf("PollWakeups = %d; want every waiting process woken by push", poll)
			}
		})
	}
}

func fleetBackend(t *testing.T, name string) ([]string, redis.UniversalClient) {
	if name == "cluster" {
		cl := redistest.StartCluster(t, 3)
		return cl.Addrs(), cl.Client(t)
	}
	s := redistest.StartServer(t)
	return []string{s.Addr()}, s.Client(t)
}

// TestMultiProcessManyKeys: 4 processes × 50 goroutines fetch random keys
// of 1000: each distinct key is computed exactly once in the fleet.
func TestMultiProcessManyKeys(t *testing.T) {
	addrs, rdb := fleetBackend(t, "redis")
	res := runChildren(t, 4, "many", addrs, "mk:")
	distinct := map[string]bool{}
	var computes uint64
	for i, r := range res {
		if len(r.Errors) > 0 {
			t.Errorf("child %d: errors %q", i, r.Errors)
		}
		for _, k := range r.Keys {
			distinct[strconv.Itoa(k)] = true
		}
		computes += r.Stats.Computes
	}
	got := computesPerKey(t, rdb, "mk:")
	for k, n := range got {
		if n != "1" {
			t.Errorf("key %s computed %s times; want 1", k, n)
		}
	}
	if len(got) != len(distinct) || computes != uint64(len(distinct)) {
		t.Errorf("computed keys = %d, Stats.Computes = %d; want both = %d distinct keys fetched", len(got), computes, len(distinct))
	}
}

// killHolder waits until holder computes, starts the waiters with start,
// SIGKILLs holder once each of them waits for it, and returns the waiters'
// results and how many takeovers they made in all.
func killHolder(t *testing.T, holder *child, start func() []*child) ([]childResult, uint64) {
	t.Helper()
	holder.expect(t, "computing")
	kids := start()
	for _, k := range kids {
		k.expect(t, "waiting")
	}
	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	results := make([]childResult, len(kids))
	var takeovers uint64
	for i, k := range kids {
		results[i] = k.result(t)
		takeovers += results[i].Stats.Takeovers
	}
	return results, takeovers
}

// TestMultiProcessHolderKilled: the computing process is SIGKILLed mid
// compute; every other caller still gets the value, after one takeover.
func TestMultiProcessHolderKilled(t *testing.T) {
	addrs, rdb := fleetBackend(t, "redis")
	const prefix = "hk:"
	lease := "DOGPILE_TEST_LEASE=500ms"
	holder := startChild(t, "holder", addrs, prefix, lease, workersEnv+"=5")
	results, takeovers := killHolder(t, holder, func() []*child { return goChildren(t, 3, "one", addrs, prefix, lease) })
	for i, r := range results {
		if r.Values != 50 || len(r.Errors) > 0 {
			t.Errorf("child %d: %d good values, errors %q; want 50, none", i, r.Values, r.Errors)
		}
	}
	if got := computesPerKey(t, rdb, prefix); got["k"] != "2" {
		t.Errorf("computes = %v; want k: 2 (the killed holder and one takeover)", got)
	}
	if takeovers != 1 {
		t.Errorf("Takeovers = %d; want 1", takeovers)
	}
}
