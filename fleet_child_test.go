package dogpile_test

// The child side of the multi-process tests: the test binary re-executed
// by redistest.StartChild (see fleet_test.go) runs one mode as one process
// of a fleet, with its own client and Cache. The modes are in
// fleet_modes_test.go, fleet_stale_modes_test.go and fleet_near_test.go.
// Each counts its computes in Redis, so that the counts of every process
// add up.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// procModes are the modes of a fleet child, by name.
var procModes = map[string]func(p *proc){
	"one":         procOne,
	"holder":      procHolder,
	"many":        procMany,
	"batch":       procBatch,
	"batchholder": procBatchHolder,
	"burst":       procBurst,
	"failing":     procFailing,
	"hold":        procHold,
	"until":       procUntil,
	"xfetch":      procXFetch,
	"absent":      procAbsent,
	"refresh":     procRefresh,
	"set":         procSet,
}

// childModes returns procModes for redistest.ChildMain.
func childModes() map[string]func(*redistest.Parent) {
	modes := make(map[string]func(*redistest.Parent), len(procModes))
	for name, mode := range procModes {
		modes[name] = func(parent *redistest.Parent) { runProc(parent, mode) }
	}
	return modes
}

// A fleet is what a fleet child is told (see goChildren for the settings).
type fleet struct {
	Addrs   []string      // one server, or a cluster's masters
	Prefix  string        // the Cache's, and the counters'
	Workers int           // goroutines making the mode's calls; 50 if 0
	Opts    string        // Cache options: "stale=1m,beta=1,neg=1m,lease=500ms"
	Run     time.Duration // how long a load runs (mode xfetch)
	Op      string        // how the compute starts: stale, fetch or refresh (mode hold)
}

// fleetResult is what a fleet child reports when its mode is done.
type fleetResult struct {
	Values   int           // answers that were the expected value
	Errors   []string      // unexpected answers (first few)
	Keys     []int         // distinct keys fetched (mode many)
	Misses   int           // loops that ended on an error (mode failing)
	FirstErr int64         // when the earliest failed call returned, unix ms
	FirstNew int64         // when the refreshed value was first served, unix ms
	Calls    int           // Fetch calls during the load (mode xfetch)
	Slow     int           // calls slower than half a compute (mode xfetch)
	Max      time.Duration // slowest call (mode xfetch)
	Stall    time.Duration // longest stall of the process or Redis (mode xfetch)
	Load     dogpile.Stats // counts during the load, after the first fill (mode xfetch)
	Stats    dogpile.Stats
}

// A proc is a fleet child.
type proc struct {
	in      *redistest.Parent // the parent: its lines (in.Scan), and ours (say)
	rdb     redis.UniversalClient
	c       *dogpile.Cache[string]
	prefix  string
	workers int
	op      string
	run     time.Duration

	mu  sync.Mutex // guards res
	res fleetResult
}

// runProc runs mode as a fleet child, and reports its result once the
// background work it started is done.
func runProc(parent *redistest.Parent, mode func(*proc)) {
	var f fleet
	parent.Params(&f)
	opts, err := procOptions(f.Opts)
	if err != nil {
		parent.Fatalf("%v", err)
	}
	p := &proc{in: parent, rdb: f.client(), prefix: f.Prefix, workers: f.Workers, op: f.Op, run: f.Run}
	defer p.rdb.Close()
	if p.workers == 0 {
		p.workers = 50
	}
	p.c = dogpile.New[string](p.rdb, append(opts, dogpile.WithPrefix(p.prefix))...)
	var once sync.Once
	dogpile.OnWait(p.c, func(string) { once.Do(func() { p.say("waiting") }) })
	mode(p)
	if !p.settle() {
		p.fail("background work did not end within 30s")
	}
	p.res.Stats = p.c.Stats()
	parent.Result(p.res)
}

// client connects to the fleet's server, or cluster.
func (f fleet) client() redis.UniversalClient {
	if len(f.Addrs) > 1 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: f.Addrs})
	}
	return redis.NewClient(&redis.Options{Addr: f.Addrs[0]})
}

// procOptions parses fleet.Opts.
func procOptions(s string) ([]dogpile.Option, error) {
	var opts []dogpile.Option
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			continue
		}
		if k == "beta" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return nil, err
			}
			opts = append(opts, dogpile.WithEarlyRefresh(f))
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("option %q: %v", kv, err)
		}
		switch k {
		case "stale":
			opts = append(opts, dogpile.WithStale(d))
		case "neg":
			opts = append(opts, dogpile.WithNegativeTTL(d))
		case "lease":
			opts = append(opts, dogpile.WithLease(d))
		default:
			return nil, fmt.Errorf("unknown option %q", kv)
		}
	}
	return opts, nil
}

// say writes a line to the parent, for its child.Expect.
func (p *proc) say(line string) { p.in.Say(line) }

// ready tells the parent that the child is ready and waits for "go", so
// that the children's calls overlap.
func (p *proc) ready() { p.in.Ready() }

// check records an answer: want, or an unexpected one.
func (p *proc) check(v, want string, err error) bool {
	if err == nil && v == want {
		p.mu.Lock()
		p.res.Values++
		p.mu.Unlock()
		return true
	}
	p.fail(fmt.Sprintf("got %q, %v; want %q", v, err, want))
	return false
}

func (p *proc) fail(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.res.Errors) < 5 {
		p.res.Errors = append(p.res.Errors, msg)
	}
}

// settle waits until no background refresh runs: a refresh outlives the
// Fetch that started it, and the counts are read once it is done.
func (p *proc) settle() bool {
	return redistest.Within(30*time.Second, func() bool { return dogpile.Flights(p.c) == 0 })
}

// count adds one to the counter name in Redis, shared by every process.
func (p *proc) count(name string) int64 {
	return p.rdb.Incr(context.Background(), p.prefix+name).Val()
}
