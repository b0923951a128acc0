package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) {
	if demo.IsWorker() {
		os.Exit(demo.ServeWorker(load))
	}
	goleak.VerifyTestMain(m)
}

// smallConfig is a short run that still sees every key expire a few times.
func smallConfig(redisAddr string) config {
	cfg := defaultConfig()
	cfg.Redis = redisAddr
	cfg.Probe = "" // never the shared localhost:6379: no address means embedded
	cfg.Procs = 1
	cfg.Goroutines = 8
	cfg.Keys = 2
	cfg.Compute = 50 * time.Millisecond
	cfg.TTL = 300 * time.Millisecond
	cfg.Duration = 800 * time.Millisecond
	cfg.JSON = true
	return cfg
}

func runJSON(t *testing.T, cfg config) map[string]modeReport {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("decode output: %v\n%s", err, out.String())
	}
	byMode := map[string]modeReport{}
	for _, m := range rep.Modes {
		byMode[m.Mode] = m
		t.Logf("%-12s computes %3d expiries %2d (max %2d) calls %6d hits %6d waited %4d lag p99 %v cmds/call %.2f",
			m.Mode, m.Computes, m.Expiries, m.MaxExpiries, m.Calls, m.Hits, m.Waited, m.WakeLagP99, m.CommandsPerCall)
	}
	return byMode
}

// checkSane checks what holds in every mode.
func checkSane(t *testing.T, cfg config, m modeReport) {
	t.Helper()
	if m.Errors != 0 {
		t.Errorf("%s: %d errors (first: %s); want none", m.Mode, m.Errors, m.FirstErr)
	}
	if m.Calls == 0 || m.Hits == 0 || m.Computes == 0 {
		t.Errorf("%s: calls %d, hits %d, computes %d; want all positive", m.Mode, m.Calls, m.Hits, m.Computes)
	}
	// A background refresh that a call near the end started may begin after
	// its process counted its computes (at most one per key and process).
	late := int64(0)
	if m.Mode == "fresh" {
		late = int64(cfg.Procs * cfg.Keys)
	} else if m.Refreshed != 0 {
		t.Errorf("%s: %d computes in the background; want none", m.Mode, m.Refreshed)
	}
	if ran := m.Computed + m.Refreshed; m.Computes < ran || m.Computes > ran+late {
		t.Errorf("%s: calls that computed %d + background %d vs Redis compute counter %d; want equal (+ at most %d late)",
			m.Mode, m.Computed, m.Refreshed, m.Computes, late)
	}
	if m.Hits+m.Waited+m.Computed+m.Errors != m.Calls {
		t.Errorf("%s: hits %d + waited %d + computed %d + errors %d != calls %d", m.Mode, m.Hits, m.Waited, m.Computed, m.Errors, m.Calls)
	}
	if m.Expiries < 2 || m.Expiries > m.MaxExpiries {
		t.Errorf("%s: expiries %d; want between 2 and %d", m.Mode, m.Expiries, m.MaxExpiries)
	}
	if m.LatencyP50 <= 0 || m.LatencyP50 > m.LatencyP99 || m.LatencyP99 > m.LatencyMax {
		t.Errorf("%s: latency p50 %v p99 %v max %v; want 0 < p50 <= p99 <= max", m.Mode, m.LatencyP50, m.LatencyP99, m.LatencyMax)
	}
	if m.SteadyP99 <= 0 || m.SteadyP99 > m.SteadyMax || m.SteadyMax > m.LatencyMax {
		t.Errorf("%s: after the first TTL p99 %v max %v (all calls: max %v); want 0 < p99 <= max <= all calls' max",
			m.Mode, m.SteadyP99, m.SteadyMax, m.LatencyMax)
	}
	if m.CommandsPerCall <= 0 || m.CommandsPerCall > 3 {
		t.Errorf("%s: %.2f Redis commands per call; want in (0, 3]", m.Mode, m.CommandsPerCall)
	}
}

// TestCompareTwoProcesses is the demo's point: across two real processes,
// dogpile computes about once per expiry while naive cache-aside piles on.
// It runs alone (not parallel), so the machine's load does not blur it.
func TestCompareTwoProcesses(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := smallConfig(srv.Addr())
	cfg.Compare = true
	cfg.Procs = 2
	got := runJSON(t, cfg)
	for _, mode := range modes {
		checkSane(t, cfg, got[mode])
	}
	dp, sf, nv := got["dogpile"], got["singleflight"], got["naive"]
	checkFresh(t, cfg, got["fresh"])
	// One compute per key per TTL window, plus a little slack for a call that
	// lands on the TTL boundary.
	if limit := int64(dp.MaxExpiries + cfg.Keys); dp.Computes > limit {
		t.Errorf("dogpile computes = %d; want <= %d (keys × windows + slack)", dp.Computes, limit)
	}
	if dp.ComputesPerExpiry > 1.25 {
		t.Errorf("dogpile computes per expiry = %.2f; want about 1", dp.ComputesPerExpiry)
	}
	if dp.Waited == 0 || dp.WakeLagP99 > 100*time.Millisecond {
		t.Errorf("dogpile waited %d, wake lag p99 %v; want waiters woken within 100ms", dp.Waited, dp.WakeLagP99)
	}
	if sf.ComputesPerExpiry > float64(cfg.Procs)+0.5 {
		t.Errorf("singleflight computes per expiry = %.2f; want at most one per process (%d)", sf.ComputesPerExpiry, cfg.Procs)
	}
	if nv.Computes < 3*dp.Computes || nv.ComputesPerExpiry < 3 {
		t.Errorf("naive computes = %d (%.2f per expiry), dogpile %d; want naive to pile on (>= 3×)",
			nv.Computes, nv.ComputesPerExpiry, dp.Computes)
	}
}

// checkFresh checks the fresh mode's point: after a key's first fill, no
// call computes (refreshes run in the background), and each expiry is still
// computed once.
func checkFresh(t *testing.T, cfg config, m modeReport) {
	t.Helper()
	if m.Refreshed == 0 {
		t.Errorf("fresh: no background refresh; want hot keys refreshed before they expire")
	}
	if m.Computed > int64(cfg.Keys) {
		t.Errorf("fresh: %d calls computed; want at most the %d first fills", m.Computed, cfg.Keys)
	}
	if m.ComputesPerExpiry > 1.25 {
		t.Errorf("fresh: computes per expiry = %.2f; want about 1", m.ComputesPerExpiry)
	}
}

func TestModesInProcessText(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := smallConfig(srv.Addr())
	cfg.Compare = true
	cfg.JSON = false
	cfg.Duration = 500 * time.Millisecond
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"naive", "singleflight", "dogpile", "fresh", "computes per expiry", "in the background", "latency p99",
		"latency max", "after the first TTL: max",
		"waiter wake lag p99", "Redis commands per call", "Stats.PushWakeups", "Stats.Refreshes", "Stats.Stale"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}

func TestDogpileOnEmbeddedServer(t *testing.T) {
	t.Parallel()
	cfg := smallConfig("")
	cfg.Probe = redistest.DeadAddr(t)
	cfg.JSON = false
	var out bytes.Buffer
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if !strings.Contains(first, "embedded miniredis") {
		t.Errorf("first line = %q; want the embedded-server notice", first)
	}
	cfg.JSON = true
	cfg.Probe = ""
	cfg.Procs = 2 // the workers use the parent's embedded server
	m := runJSON(t, cfg)["dogpile"]
	checkSane(t, cfg, m)
	if m.ComputesPerExpiry > 1.25 {
		t.Errorf("dogpile on miniredis: computes per expiry = %.2f; want about 1", m.ComputesPerExpiry)
	}
	if m.Expiries <= cfg.Keys {
		t.Errorf("dogpile on miniredis: %d expiries for %d keys; want keys to expire during the run", m.Expiries, cfg.Keys)
	}
	cfg.Mode = "fresh" // WithStale's GET+PTTL and the refresh script on miniredis
	m = runJSON(t, cfg)["fresh"]
	checkSane(t, cfg, m)
	checkFresh(t, cfg, m)
}

func TestRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, mod := range []func(*config){
		func(c *config) { c.Mode = "memcached" },
		func(c *config) { c.Keys = 0 },
		func(c *config) { c.TTL = c.Compute },
		func(c *config) { c.Duration = 0 },
	} {
		cfg := smallConfig("")
		mod(&cfg)
		if err := run(t.Context(), cfg, &bytes.Buffer{}); err == nil {
			t.Errorf("run(%+v) succeeded; want an error", cfg)
		}
	}
}

// TestDogpileOnCluster gives -redis several comma-separated addresses: the
// library must dedupe across two processes on a real 3-master cluster.
func TestDogpileOnCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	cfg := smallConfig(strings.Join(cluster.Addrs(), ","))
	cfg.Procs = 2
	m := runJSON(t, cfg)["dogpile"]
	checkSane(t, cfg, m)
	if limit := int64(m.MaxExpiries + cfg.Keys); m.Computes > limit || m.ComputesPerExpiry > 1.25 {
		t.Errorf("dogpile on a cluster: computes %d (%.2f per expiry); want <= %d and about 1 per expiry",
			m.Computes, m.ComputesPerExpiry, limit)
	}
}

// TestReadmeShowsTodaysTable: the sample run in examples/README.md has the
// rows -compare prints today, in the same order.
func TestReadmeShowsTodaysTable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used: New does no I/O
	defer client.Close()
	lib := newDogpile(client, "p:", time.Second).stats()
	var reps []modeReport
	for _, mode := range modes {
		m := modeReport{Mode: mode, Waited: 1}
		if mode == "dogpile" || mode == "fresh" {
			m.Library = lib
		}
		reps = append(reps, m)
	}
	var out bytes.Buffer
	if err := printTable(&out, reps); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sample, ok := strings.Cut(string(readme), "A run of `go run ./examples/dogpile -compare")
	_, sample, ok2 := strings.Cut(sample, "```\n")
	sample, _, ok3 := strings.Cut(sample, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("examples/README.md has no sample run of -compare")
	}
	if got, want := demo.RowLabels(sample), demo.RowLabels(out.String()); !slices.Equal(got, want) {
		t.Errorf("the README's sample has the rows\n%q\n-compare prints\n%q", got, want)
	}
}
