package dogpile

// The parent side of the multi-process tests: fleets of children (the test
// binary re-executed in a mode of fleet_child_test.go) on a redis-server or
// a 3-master cluster, started together through redistest's child harness.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The settings of a fleet child beyond its Redis and prefix, given as
// "name=value" to startChild and goChildren: optsEnv+"=stale=1m". They
// travel in the child's one fleet value; the names are those of the
// environment variables that once carried them.
const (
	optsEnv    = "DOGPILE_TEST_OPTS"    // fleet.Opts
	workersEnv = "DOGPILE_TEST_WORKERS" // fleet.Workers
	runEnv     = "DOGPILE_TEST_RUN"     // fleet.Run
	opEnv      = "DOGPILE_TEST_OP"      // fleet.Op
)

// A child is one process of a fleet.
type child struct {
	*redistest.Child
	cmd struct{ Process process } // see process
}

// startChild starts a child in mode, without waiting for it to be ready
// (the holder modes never say so).
func startChild(t *testing.T, mode string, addrs []string, prefix string, settings ...string) *child {
	t.Helper()
	return newChild(redistest.StartChild(t, mode, newFleet(t, addrs, prefix, settings)))
}

// readyChildren starts n children in mode and waits until each is ready
// (started, connected): a test that times its children starts the clock
// after that.
func readyChildren(t *testing.T, n int, mode string, addrs []string, prefix string, settings ...string) []*child {
	t.Helper()
	kids := make([]*child, n)
	for i, k := range redistest.StartChildren(t, n, mode, newFleet(t, addrs, prefix, settings)) {
		kids[i] = newChild(k)
	}
	return kids
}

// goChildren starts n children in mode, waits until each is ready, and
// lets them go together.
func goChildren(t *testing.T, n int, mode string, addrs []string, prefix string, settings ...string) []*child {
	t.Helper()
	kids := readyChildren(t, n, mode, addrs, prefix, settings...)
	letGo(t, kids)
	return kids
}

// letGo tells ready children to go.
func letGo(t *testing.T, kids []*child) {
	t.Helper()
	for _, k := range kids {
		k.Go(t)
	}
}

// runChildren starts n children in mode, lets them go together, and
// returns their results.
func runChildren(t *testing.T, n int, mode string, addrs []string, prefix string, settings ...string) []fleetResult {
	t.Helper()
	return collect(t, goChildren(t, n, mode, addrs, prefix, settings...))
}

// collect returns the children's results, once each has exited cleanly.
func collect(t *testing.T, kids []*child) []fleetResult {
	t.Helper()
	res := make([]fleetResult, len(kids))
	for i, k := range kids {
		k.Result(t, &res[i])
		k.Wait(t)
	}
	return res
}

// results is collect, with each child's unexpected answers reported.
func results(t *testing.T, kids []*child) []fleetResult {
	t.Helper()
	res := collect(t, kids)
	for i, r := range res {
		if len(r.Errors) > 0 {
			t.Errorf("child %d: %q", i, r.Errors)
		}
	}
	return res
}

func newFleet(t *testing.T, addrs []string, prefix string, settings []string) fleet {
	t.Helper()
	f := fleet{Addrs: addrs, Prefix: prefix}
	for _, s := range settings {
		name, v, _ := strings.Cut(s, "=")
		var err error
		switch name {
		case optsEnv:
			f.Opts = v
		case workersEnv:
			f.Workers, err = strconv.Atoi(v)
		case runEnv:
			f.Run, err = time.ParseDuration(v)
		case opEnv:
			f.Op = v
		default:
			err = errors.New("unknown setting")
		}
		if err != nil {
			t.Fatalf("child setting %q: %v", s, err)
		}
	}
	return f
}

// onFleets runs f on a redis-server and on a 3-master cluster.
func onFleets(t *testing.T, f func(t *testing.T, addrs []string, rdb redis.UniversalClient)) {
	for _, b := range []string{"redis", "cluster"} {
		t.Run(b, func(t *testing.T) {
			addrs, rdb := fleetBackend(t, b)
			f(t, addrs, rdb)
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

// counter reads a counter the children incremented.
func counter(t *testing.T, rdb redis.UniversalClient, name string) int64 {
	t.Helper()
	n, err := rdb.Get(context.Background(), name).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// computesPerKey reads the hash of computes per key the children counted.
func computesPerKey(t *testing.T, rdb redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	m, err := rdb.HGetAll(context.Background(), prefix+"computes").Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The child's expect and say, cmd.Process, pause and resume keep the
// tests of fresh_takeover_test.go and fresh_xfetch_test.go compiling until
// they call Expect, Say, Kill, Pause and Resume of redistest.Child.

func newChild(c *redistest.Child) *child {
	k := &child{Child: c}
	k.cmd.Process = process{c}
	return k
}

func (c *child) expect(t *testing.T, want string) { t.Helper(); c.Expect(t, want) }

func (c *child) say(t *testing.T, line string) { t.Helper(); c.Say(t, line) }

// A process stands in for the child's *os.Process: it kills, pauses and
// resumes the child through the harness.
type process struct{ c *redistest.Child }

func (p process) Kill() error { p.c.Kill(); return nil }

func pause(t *testing.T, p process) { t.Helper(); p.c.Pause(t) }

func resume(t *testing.T, p process) { t.Helper(); p.c.Resume(t) }
