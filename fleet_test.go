package dogpile_test

// The parent side of the multi-process tests: fleets of children (the test
// binary re-executed in a mode of fleet_child_test.go) on a redis-server or
// a 3-master cluster, started together through redistest's child harness.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A setting sets what a fleet child is told beyond its Redis and prefix.
type setting func(*fleet)

func withOpts(opts string) setting { return func(f *fleet) { f.Opts = opts } }
func withWorkers(n int) setting    { return func(f *fleet) { f.Workers = n } }
func withRun(d time.Duration) setting {
	return func(f *fleet) { f.Run = d }
}
func withOp(op string) setting { return func(f *fleet) { f.Op = op } }

// A child is one process of a fleet.
type child = redistest.Child

// startChild starts a child in mode, without waiting for it to be ready
// (the holder modes never say so).
func startChild(t *testing.T, mode string, addrs []string, prefix string, settings ...setting) *child {
	t.Helper()
	return redistest.StartChild(t, mode, newFleet(addrs, prefix, settings))
}

// readyChildren starts n children in mode and waits until each is ready
// (started, connected): a test that times its children starts the clock
// after that.
func readyChildren(t *testing.T, n int, mode string, addrs []string, prefix string, settings ...setting) []*child {
	t.Helper()
	return redistest.StartChildren(t, n, mode, newFleet(addrs, prefix, settings))
}

// goChildren starts n children in mode, waits until each is ready, and
// lets them go together.
func goChildren(t *testing.T, n int, mode string, addrs []string, prefix string, settings ...setting) []*child {
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
func runChildren(t *testing.T, n int, mode string, addrs []string, prefix string, settings ...setting) []fleetResult {
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

func newFleet(addrs []string, prefix string, settings []setting) fleet {
	f := fleet{Addrs: addrs, Prefix: prefix}
	for _, set := range settings {
		set(&f)
	}
	return f
}

// onFleets runs f on a redis-server and on a 3-master cluster, as
// subtests in parallel with each other: a fleet mostly waits (for its
// children to start, for Redis, for a compute), and the two share no
// server and no package-level state. A test whose fleet must have the
// machine to itself (a load it measures, a lease shorter than a second
// that a stall would lose) uses onFleetsInTurn.
func onFleets(t *testing.T, f func(t *testing.T, addrs []string, rdb redis.UniversalClient)) {
	for _, b := range []string{"redis", "cluster"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			addrs, rdb := fleetBackend(t, b)
			f(t, addrs, rdb)
		})
	}
}

// onFleetsInTurn is onFleets with the redis-server's subtest run before
// the cluster's.
func onFleetsInTurn(t *testing.T, f func(t *testing.T, addrs []string, rdb redis.UniversalClient)) {
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
