package torture

// runner_test.go drives one run: it starts the servers, the oracle and
// the worker processes, lets the nemesis loose for the run's length, stops
// the workers, and checks the history they recorded. It and the other
// runner_*_test.go files are the runner, which drives dogpile's public
// API; they are test code, so that the package itself, the checker,
// imports neither dogpile nor lock.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

const (
	// settle is the fault-free time at the end of a run: calls in flight
	// when the last fault healed finish, and the workers work normally
	// again before they stop.
	settle = time.Second
	// maxExcerpts is how many violations a failure prints in full.
	maxExcerpts = 5
)

// A Run is one run's settings.
type Run struct {
	Seed     uint64
	Topology string
	Duration time.Duration // of the faults; the run lasts a little longer
	Keep     string        // a directory to save the history in (see LoadHistory), or ""
	Strict   bool          // fail on violations of known defects too
}

// Go runs r, checks its history, logs its figures and fails t with each
// violation found.
func (r Run) Go(t *testing.T) {
	plan := NewPlan(r.Seed, r.Topology)
	t.Logf("torture: %s\n  replay with -torture.seed %d", plan, r.Seed)
	n, ledgers := r.start(t, plan)
	start := time.Now()
	for _, proc := range slices.Sorted(maps.Keys(n.kids)) {
		n.kids[proc].Go(t)
	}
	n.run(r.Duration)
	time.Sleep(settle)
	if n.cl != nil {
		n.followFailovers(n.round)
	}
	h := &History{Plan: plan, Faults: n.faults, Died: n.died, Leaks: map[int]string{}}
	stopping := time.Now()
	results := stop(t, n.kids)
	for proc, res := range results {
		h.Leaks[proc] = res.Leak
	}
	ops, err := ReadLedgers(*ledgers)
	if err != nil {
		t.Fatal(err)
	}
	h.Ops = ops
	t.Logf("torture: faults for %v, stopped in %v", stopping.Sub(start).Round(100*time.Millisecond),
		time.Since(stopping).Round(100*time.Millisecond))
	if r.Keep != "" {
		path := filepath.Join(r.Keep, fmt.Sprintf("torture-%s-%d.json", r.Topology, r.Seed))
		if err := h.Save(path); err != nil {
			t.Error(err)
		}
		t.Logf("torture: history saved in %s", path)
	}
	v := Check(h)
	t.Logf("torture: %s", Figures(h, results, time.Since(start), v))
	r.report(t, h, v.Violations)
}

// start starts the servers, the oracle and the worker processes, and
// waits until every worker is ready. It returns the nemesis that rules
// them, and the workers' ledger files (more as it starts replacements).
func (r Run) start(t *testing.T, plan Plan) (*nemesis, *[]string) {
	n := &nemesis{t: t, r: rand.New(rand.NewPCG(r.Seed, 1)), plan: plan,
		kids: map[int]*redistest.Child{}, died: map[int]int64{}}
	oracle := redistest.StartServer(t)
	var addrs []string
	if r.Topology == Cluster {
		n.cl = redistest.StartClusterReplicas(t, 3, 1)
		for i, m := range n.cl.Nodes {
			n.shards = append(n.shards, [2]*redistest.Server{m, n.cl.Replicas[i][0]})
			addrs = append(addrs, m.Addr(), n.cl.Replicas[i][0].Addr())
		}
	} else {
		n.srv = redistest.StartServer(t)
		n.proxy = redistest.StartProxy(t, n.srv.Addr())
	}
	dir := t.TempDir()
	ledgers := new([]string)
	// launch starts worker proc; a replacement takes the configuration of
	// the process it replaces.
	launch := func(proc int) *redistest.Child {
		wp := WorkerParams{Plan: plan, Proc: proc, Addrs: addrs, Cluster: n.cl != nil, Oracle: oracle.Addr(),
			Ledger: filepath.Join(dir, fmt.Sprintf("ledger%d", proc))}
		if n.cl == nil {
			wp.Addrs = []string{n.srv.Addr()}
			if slices.Contains(plan.Proxied, plan.slot(proc)) {
				wp.Addrs = []string{n.proxy.Addr()}
			}
		}
		*ledgers = append(*ledgers, wp.Ledger)
		var env []string
		if slices.Contains(plan.Batched, plan.slot(proc)) {
			env = append(env, roundtrip.DirectEnv+"=1")
		}
		return redistest.StartChild(t, workerMode, wp, env...)
	}
	n.spawn = func(proc int) *redistest.Child {
		k := launch(proc)
		k.Expect(t, "ready")
		return k
	}
	for n.procs < plan.Procs {
		n.procs++
		n.kids[n.procs] = launch(n.procs) // all start at once
	}
	for _, k := range n.kids {
		k.Expect(t, "ready")
	}
	return n, ledgers
}

// stop tells every live worker to stop, all at once (each waits for its
// calls in flight), and returns their results, by process, once they
// exited.
func stop(t *testing.T, kids map[int]*redistest.Child) map[int]WorkerResult {
	for _, k := range kids {
		k.Say(t, "stop")
	}
	results := map[int]WorkerResult{}
	for proc, k := range kids {
		var res WorkerResult
		k.Result(t, &res)
		k.Wait(t)
		results[proc] = res
	}
	return results
}

// report fails t with each violation, but for instances of known
// defects, of which it logs the first of each.
func (r Run) report(t *testing.T, h *History, vs []Violation) {
	failed, logged := 0, map[string]bool{}
	for _, v := range vs {
		if v.Known != "" && !r.Strict {
			if !logged[v.Known] {
				logged[v.Known] = true
				t.Logf("torture: seed %d: known defect %s (%s):\n%s", r.Seed, v.Known, Known(v.Known), Excerpt(h, v))
			}
			continue
		}
		if failed++; failed > maxExcerpts {
			continue
		}
		t.Errorf("torture: seed %d: %s", r.Seed, Excerpt(h, v))
	}
	if failed > maxExcerpts {
		t.Errorf("torture: seed %d: ... and %d more violations", r.Seed, failed-maxExcerpts)
	}
}

// Figures summarizes a run: operations checked, faults injected by kind,
// violations.
func Figures(h *History, results map[int]WorkerResult, took time.Duration, v Verdict) string {
	ops, failed := map[string]int{}, map[string]int{}
	for _, op := range h.Ops {
		ops[op.Kind]++
		if !op.ok() {
			failed[op.Kind]++
		}
	}
	faults := map[string]int{}
	for _, f := range h.Faults {
		faults[f.Kind]++
	}
	var takeovers, nearHits, stale, kept uint64
	for _, res := range results {
		for _, s := range res.Stats {
			takeovers += s.Takeovers
			nearHits += s.NearHits
			stale += s.Stale
			kept += s.StaleIfDown
		}
	}
	rules, defects := map[string]int{}, map[string]int{}
	for _, x := range v.Violations {
		if x.Known != "" {
			defects[x.Known]++
			continue
		}
		rules[x.Rule]++
	}
	var judged []string
	for _, rule := range slices.Sorted(maps.Keys(v.Checked)) {
		judged = append(judged, fmt.Sprintf("%s %d/%d excused", rule, v.Checked[rule], v.Excused[rule]))
	}
	return fmt.Sprintf("%s, %v: %d ops (%s); faults %s; takeovers %d, near hits %d, stale hits %d, kept copies served %d; "+
		"checked %s; near tier behind a write %d times, at most %v; known defects (%s); %d violations (%s)",
		h.Plan.Topology, took.Round(100*time.Millisecond), len(h.Ops), counts(ops, failed), counts(faults, nil),
		takeovers, nearHits, stale, kept, strings.Join(judged, ", "), v.NearLags, v.MaxNearLag.Round(time.Microsecond),
		counts(defects, nil), len(v.Violations)-sum(defects), counts(rules, nil))
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// counts formats counts by name, with the failed ones after a slash.
func counts(m, failed map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s := fmt.Sprintf("%s %d", k, m[k])
		if failed[k] > 0 {
			s += fmt.Sprintf("/%d failed", failed[k])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
