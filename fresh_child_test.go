package dogpile

// The child side of the multi-process freshness tests (fresh_procs_test.go):
// modes of the re-executed test binary, dispatched from childMain. Each
// child is one process of the fleet, with its own client and Cache; it counts
// computes in Redis, so that the counts of every process add up.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	optsEnv = "DOGPILE_TEST_OPTS" // Cache options: "stale=1m,beta=1,neg=1m,lease=500ms"
	runEnv  = "DOGPILE_TEST_RUN"  // how long a load runs (mode xfetch)
	opEnv   = "DOGPILE_TEST_OP"   // fetch or refresh (mode hold)
)

// procResult is what a freshness child prints on its last line, after
// "result ".
type procResult struct {
	Values   int           // answers that were the expected value
	Errors   []string      // unexpected answers (first few)
	Misses   int           // loops that ended on an error (mode failing)
	FirstErr int64         // when the earliest failed call returned, unix ms
	FirstNew int64         // when the refreshed value was first served, unix ms
	Calls    int           // Fetch calls during the load (mode xfetch)
	Slow     int           // calls slower than half a compute (mode xfetch)
	Max      time.Duration // slowest call (mode xfetch)
	Stall    time.Duration // longest stall of the process or Redis (mode xfetch)
	Load     Stats         // counts during the load, after the first fill (mode xfetch)
	Stats    Stats
}

// A proc is a freshness child.
type proc struct {
	rdb     redis.UniversalClient
	c       *Cache[string]
	prefix  string
	workers int
	in      *bufio.Scanner

	outMu sync.Mutex
	out   *bufio.Writer

	mu  sync.Mutex // guards res
	res procResult
}

var procModes = map[string]func(p *proc){
	"burst":   procBurst,
	"failing": procFailing,
	"hold":    procHold,
	"until":   procUntil,
	"xfetch":  procXFetch,
	"absent":  procAbsent,
	"refresh": procRefresh,
	"set":     procSet,
}

// procMain runs mode if it is a freshness mode; ok reports whether it was.
func procMain(mode string) (code int, ok bool) {
	f := procModes[mode]
	if f == nil {
		return 0, false
	}
	p := &proc{rdb: childClient(), prefix: os.Getenv(prefixEnv), in: bufio.NewScanner(os.Stdin), out: bufio.NewWriter(os.Stdout)}
	defer p.rdb.Close()
	p.workers, _ = strconv.Atoi(os.Getenv(workersEnv))
	if p.workers == 0 {
		p.workers = 50
	}
	opts, err := procOptions(os.Getenv(optsEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2, true
	}
	p.c = New[string](p.rdb, append(opts, WithPrefix(p.prefix))...)
	var once sync.Once
	p.c.onWait = func(string) { once.Do(func() { p.say("waiting") }) }
	f(p)
	if !p.settle() {
		p.fail("background work did not end within 30s")
	}
	p.res.Stats = p.c.Stats()
	b, _ := json.Marshal(p.res)
	p.say("result " + string(b))
	return 0, true
}

// procOptions parses optsEnv.
func procOptions(s string) ([]Option, error) {
	var opts []Option
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
			opts = append(opts, WithEarlyRefresh(f))
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("option %q: %v", kv, err)
		}
		switch k {
		case "stale":
			opts = append(opts, WithStale(d))
		case "neg":
			opts = append(opts, WithNegativeTTL(d))
		case "lease":
			opts = append(opts, WithLease(d))
		default:
			return nil, fmt.Errorf("unknown option %q", kv)
		}
	}
	return opts, nil
}

func (p *proc) say(line string) {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	fmt.Fprintln(p.out, line)
	p.out.Flush()
}

// ready tells the parent that the child is ready and waits for "go", so
// that the children's calls overlap.
func (p *proc) ready() {
	p.say("ready")
	p.in.Scan()
}

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
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.c.flights.mu.Lock()
		n := len(p.c.flights.m)
		p.c.flights.mu.Unlock()
		if n == 0 {
			return true
		}
	}
	return false
}

// count adds one to the counter name in Redis, shared by every process.
func (p *proc) count(name string) int64 {
	return p.rdb.Incr(context.Background(), p.prefix+name).Val()
}
