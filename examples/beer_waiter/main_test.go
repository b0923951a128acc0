package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) {
	if demo.IsWorker() {
		os.Exit(demo.ServeWorker(drinkers))
	}
	goleak.VerifyTestMain(m)
}

// smallConfig is a run of about a second in which some waiters are served
// and some give up, whatever the drink times: the first is served at once,
// and 7 drinks of at least 150ms outlast the last arrival's 800ms timeout
// (70ms of stagger).
func smallConfig(redisAddr string) config {
	cfg := defaultConfig()
	cfg.Redis = redisAddr
	cfg.Probe = "" // never the shared localhost:6379: no address means embedded
	cfg.Waiters = 8
	cfg.Timeout = 800 * time.Millisecond
	cfg.DrinkMin, cfg.DrinkMax = 150*time.Millisecond, 250*time.Millisecond
	cfg.JSON = true
	return cfg
}

func runJSON(t *testing.T, cfg config) report {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode output: %v\n%s", err, out.String())
	}
	return rep
}

// checkReport checks the figures every run must show.
func checkReport(t *testing.T, rep report, waiters int) {
	t.Helper()
	if rep.Served+rep.TimedOut != waiters || rep.Errors != 0 {
		t.Errorf("served %d + timed out %d (errors %d); want %d in all", rep.Served, rep.TimedOut, rep.Errors, waiters)
	}
	if rep.Served == 0 || rep.TimedOut == 0 {
		t.Errorf("served %d, timed out %d; want some of each", rep.Served, rep.TimedOut)
	}
	if rep.MaxHolders != 1 {
		t.Errorf("max concurrent holders = %d; want 1", rep.MaxHolders)
	}
	if !rep.FencesOK || rep.Overlaps != 0 || rep.Lost != 0 || len(rep.Failures) != 0 {
		t.Errorf("fences ok %v, overlaps %d, lost %d, failures %q; want ok, 0, 0, none",
			rep.FencesOK, rep.Overlaps, rep.Lost, rep.Failures)
	}
	if rep.Overtaken < 0 {
		t.Errorf("overtaken = %d with staggered arrivals; want it measured", rep.Overtaken)
	}
	var lastFence int64
	for _, w := range rep.WaiterTable {
		if !w.Served {
			if w.Wait < 800*time.Millisecond {
				t.Errorf("waiter %d gave up after %v; want at least the 800ms timeout", w.ID, w.Wait)
			}
			continue
		}
		if w.Fence <= lastFence {
			t.Errorf("waiter %d fence %d after %d; want strictly increasing", w.ID, w.Fence, lastFence)
		}
		lastFence = w.Fence
	}
}

func TestBeerWaiterOneProcess(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := smallConfig(srv.Addr())
	cfg.JSON = false
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{`w0\d +p0 +beer `, `gave up`, `max concurrent holders \(Redis counter\) +1 +ok`,
		`served \+ timed out +8 of 8 +ok`, `fences strictly increasing in hold order +true +ok`} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "FAIL") {
		t.Errorf("output reports a failure:\n%s", text)
	}
	checkReport(t, runJSON(t, smallConfig(srv.Addr())), 8)

	cfg = smallConfig(srv.Addr())
	cfg.Stagger = 0
	if rep := runJSON(t, cfg); rep.Overtaken != -1 {
		t.Errorf("overtaken = %d with simultaneous arrivals; want -1 (not measured)", rep.Overtaken)
	}
}

func TestBeerWaiterTwoProcesses(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := smallConfig("redis://" + srv.Addr() + "/0")
	cfg.Procs = 2
	rep := runJSON(t, cfg)
	checkReport(t, rep, 8)
	procs := map[int]int{}
	for _, w := range rep.WaiterTable {
		procs[w.Proc]++
	}
	if procs[0] != 4 || procs[1] != 4 {
		t.Errorf("waiters per process = %v; want 4 and 4", procs)
	}
}

func TestBeerWaiterEmbedded(t *testing.T) {
	t.Parallel()
	cfg := smallConfig("")
	cfg.Probe = redistest.DeadAddr(t)
	cfg.Procs = 2 // the workers use the parent's embedded server
	cfg.JSON = false
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if !strings.Contains(first, "embedded miniredis") {
		t.Errorf("first line = %q; want the embedded-server notice", first)
	}
	if !regexp.MustCompile(`max concurrent holders \(Redis counter\) +1 +ok`).MatchString(out.String()) {
		t.Errorf("output lacks max holders 1:\n%s", out.String())
	}
}

func TestBeerWaiterProgressOnLongRun(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := smallConfig(srv.Addr())
	cfg.Waiters = 6
	cfg.Timeout = 2300 * time.Millisecond
	cfg.DrinkMin, cfg.DrinkMax = 300*time.Millisecond, 600*time.Millisecond
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep := runJSON(t, cfg)
	if rep.MaxHolders != 1 || rep.Served+rep.TimedOut != 6 {
		t.Errorf("max holders %d, served+timed out %d; want 1, 6", rep.MaxHolders, rep.Served+rep.TimedOut)
	}
	if !strings.Contains(progress.String(), "served") {
		t.Errorf("progress = %q; want a progress line for a run over 2s", progress.String())
	}
}

// TestBeerWaiterFairServesInArrivalOrder: with -fair, across two processes,
// nobody is overtaken by a later arrival. Arrival is the order in which
// Redis queued the waiters, known for a pair when one's request had reached
// Redis before the other called Lock (see asked.go): the order of the calls
// alone is not enough, since a loaded machine stalls a caller between its
// call and its request (2 waiters whose timers fired in one stall, 0.2 ms
// apart, reached Redis in the other order; this failed 2 runs in 30).
func TestBeerWaiterFairServesInArrivalOrder(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := smallConfig(srv.Addr())
	cfg.Procs = 2
	cfg.Fair = true
	cfg.Stagger = 20 * time.Millisecond
	rep := runJSON(t, cfg)
	checkReport(t, rep, 8)
	if rep.Overtaken != 0 {
		t.Errorf("-fair: %d waiters overtaken by later arrivals; want 0", rep.Overtaken)
	}
	// The fences, drawn by Redis as it grants, follow the known arrival
	// order too; and some pairs are in a known order, or the checks above
	// prove nothing.
	known := 0
	for _, a := range rep.WaiterTable {
		for _, b := range rep.WaiterTable {
			if a.Err != "" || !b.Served || a.Asked >= b.Arrive {
				continue
			}
			known++
			if a.Served && a.Fence > b.Fence {
				t.Errorf("-fair: waiter %d, in line before waiter %d asked, held the tap after it (fence %d > %d)", a.ID, b.ID, a.Fence, b.Fence)
			}
		}
	}
	if known == 0 {
		t.Errorf("no pair of waiters in a known arrival order: %+v", rep.WaiterTable)
	}
}

func TestBeerWaiterRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, mod := range []func(*config){
		func(c *config) { c.Waiters = 0 },
		func(c *config) { c.Procs = 9 },
		func(c *config) { c.TTL = c.DrinkMax },
		func(c *config) { c.DrinkMin = 0 },
	} {
		cfg := smallConfig("")
		mod(&cfg)
		if err := run(t.Context(), cfg, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%+v) succeeded; want an error", cfg)
		}
	}
}

// TestBeerWaiterOnCluster gives -redis several comma-separated addresses:
// the demo must talk to a real 3-master cluster through a ClusterClient.
func TestBeerWaiterOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	cfg := smallConfig(strings.Join(cluster.Addrs(), ","))
	cfg.Procs = 2
	rep := runJSON(t, cfg)
	checkReport(t, rep, 8)
	if !strings.Contains(rep.Server, ",") {
		t.Errorf("server = %q; want the cluster's addresses", rep.Server)
	}
}

// TestBeerWaiterOnMemcached runs the demo on a private memcached, in one
// process and in two: the same checks, fencing aside.
func TestBeerWaiterOnMemcached(t *testing.T) {
	t.Parallel()
	mc := redistest.StartMemcached(t)
	cfg := smallConfig("")
	cfg.Memcache = mc.Addr()
	cfg.JSON = false
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{`on memcached 127\.0\.0\.1:\d+`, `max concurrent holders \(memcached counter\) +1 +ok`,
		`served \+ timed out +8 of 8 +ok`, `overlapping holds \(local clock\) +0 +ok`, `memcached: no fencing`,
		`waiters overtaken by a later arrival \(pairs\) +- \(memcached: not measured\)`} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "FAIL") {
		t.Errorf("output reports a failure:\n%s", text)
	}
	cfg = smallConfig("")
	cfg.Memcache = mc.Addr()
	cfg.Procs = 2
	rep := runJSON(t, cfg)
	if rep.MaxHolders != 1 || rep.Served+rep.TimedOut != 8 || rep.Served == 0 || rep.Errors != 0 || rep.Overlaps != 0 || len(rep.Failures) != 0 {
		t.Errorf("two processes on memcached: max holders %d, served %d + timed out %d, errors %d, overlaps %d, failures %q",
			rep.MaxHolders, rep.Served, rep.TimedOut, rep.Errors, rep.Overlaps, rep.Failures)
	}
	if rep.Fenced {
		t.Error("report claims fencing on memcached")
	}
	if rep.Overtaken != -1 {
		t.Errorf("overtaken = %d on memcached; want -1 (not measured: the demo does not see when a waiter got in line)", rep.Overtaken)
	}
}

func TestBeerWaiterMemcachedRejectsFair(t *testing.T) {
	t.Parallel()
	cfg := smallConfig("")
	cfg.Memcache = redistest.DeadAddr(t)
	cfg.Fair = true
	if err := run(t.Context(), cfg, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "-fair") {
		t.Errorf("run with -fair on memcached = %v; want an error naming -fair", err)
	}
}

// TestReadmeShowsTodaysReport: the sample runs in examples/README.md (on
// Redis, with -fair, on memcached) have the rows the demo prints today, and
// fences as they are now: 16 digits, from the server's clock.
func TestReadmeShowsTodaysReport(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var samples []string
	for _, block := range strings.Split(string(readme), "```")[1:] {
		if strings.HasPrefix(strings.TrimSpace(block), "15 waiters in") {
			samples = append(samples, block)
		}
	}
	if len(samples) != 3 {
		t.Fatalf("examples/README.md has %d sample runs of beer_waiter; want 3 (Redis, -fair, memcached)", len(samples))
	}
	for i, fenced := range []bool{true, true, false} {
		var out bytes.Buffer
		cfg := defaultConfig()
		if !fenced {
			cfg.Memcache = "127.0.0.1:1"
		}
		printReport(&out, summarize(cfg, []waiter{{ID: 1, Served: true, Fence: 1795559604775383}}, 1, time.Second))
		waiterRow := func(label string) bool { return regexp.MustCompile(`^w\d\d$`).MatchString(label) }
		got := slices.DeleteFunc(demo.RowLabels(samples[i]), waiterRow)
		if want := slices.DeleteFunc(demo.RowLabels(out.String()), waiterRow); !slices.Equal(got, want) {
			t.Errorf("sample %d has the rows\n%q\nthe demo prints\n%q", i+1, got, want)
		}
		if has := regexp.MustCompile(`beer +\S+ +\S+ +\d{16}\n`).MatchString(samples[i]); has != fenced {
			t.Errorf("sample %d shows 16-digit fences: %v; want %v", i+1, has, fenced)
		}
	}
}
