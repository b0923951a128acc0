package benchmarks

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// lockProcs is how many processes contend in BenchmarkMutexProcs.
const lockProcs = 8

// BenchmarkMutexProcs: 8 processes (the test binary re-executed, each
// with its own client, one goroutine) contend for one mutex, each holding
// it 1 ms and asking again at once, for b.N ms of wall time (at least a
// second). Unlike BenchmarkMutex's 8-client scenario, the contenders do not
// share a Go scheduler or a clock read, as on a real fleet. It reports
// acquisitions per second, the wait inside Lock (p50, p99, max) over all
// processes (a Lock still waiting when the run ends counts with its wait
// so far), fairness (the most acquisitions of any process divided by the
// fewest, a starved one counting as 1), and the server's commands and CPU
// per acquisition; ns/op is wall time per acquisition.
func BenchmarkMutexProcs(b *testing.B) {
	srv := redistest.StartServer(b)
	b.Run("contended-8procs-hold1ms", func(b *testing.B) {
		for _, lib := range rotated(mutexLibs) {
			b.Run(lib.name, func(b *testing.B) { runMutexProcs(b, srv.Addr(), lib) })
		}
	})
}

// A mutexProcsSpec is what a child of BenchmarkMutexProcs is told: lock
// Name with library Lib on the Redis at Addr, for Run from the parent's go.
type mutexProcsSpec struct {
	Addr, Lib, Name string
	Run             time.Duration
}

// A lockProcsResult is one child's answer: the wait of each acquisition,
// and how long its last Lock had waited in vain when the run ended (a
// starved process's only sample, which the percentiles must not drop).
type lockProcsResult struct {
	Waits   []time.Duration
	Pending time.Duration
}

func runMutexProcs(b *testing.B, addr string, lib mutexLib) {
	run := max(time.Duration(b.N)*time.Millisecond, time.Second)
	name := fmt.Sprintf("bench:procs:%s:%d", lib.name, time.Now().UnixNano())
	// Each child is connected and has taken the lock once when it says
	// ready: the run measures contention, not start-up.
	children := redistest.StartChildren(b, lockProcs, "mutex", mutexProcsSpec{Addr: addr, Lib: lib.name, Name: name, Run: run})
	cpu0, calls0 := serverCPU(b, addr), serverCalls(b, addr)
	for _, c := range children {
		c.SetTimeout(redistest.ChildTimeout + run)
		c.Go(b)
	}
	var all []time.Duration
	acquired, most, fewest := 0, 0, math.MaxInt
	for _, c := range children {
		var res lockProcsResult
		c.Result(b, &res)
		acquired += len(res.Waits)
		all = append(all, res.Waits...)
		if res.Pending > 0 {
			all = append(all, res.Pending)
		}
		most, fewest = max(most, len(res.Waits)), min(fewest, max(len(res.Waits), 1))
	}
	n := max(acquired, 1)
	b.ReportMetric(float64(serverCPU(b, addr)-cpu0)/float64(time.Microsecond)/float64(n), "srv-µs/op")
	b.ReportMetric(float64(serverCalls(b, addr)-calls0-2)/float64(n), "srv-cmds/op")
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(run)/float64(n), "ns/op")
	b.ReportMetric(float64(n)/run.Seconds(), "acq/s")
	b.ReportMetric(ms(percentile(all, 0.50)), "wait-p50-ms")
	b.ReportMetric(ms(percentile(all, 0.99)), "wait-p99-ms")
	b.ReportMetric(ms(percentile(all, 1)), "wait-max-ms")
	b.ReportMetric(float64(most)/float64(fewest), "fairness")
}

// mutexChild is one process of BenchmarkMutexProcs.
func mutexChild(p *redistest.Parent) {
	var spec mutexProcsSpec
	p.Params(&spec)
	i := slices.IndexFunc(mutexLibs, func(l mutexLib) bool { return l.name == spec.Lib })
	if i < 0 {
		p.Fatalf("unknown library %q", spec.Lib)
	}
	rdb := redis.NewClient(&redis.Options{Addr: spec.Addr, PoolSize: 2})
	defer rdb.Close()
	lockFn := mutexLibs[i].newLocker(rdb, spec.Name, 0)
	warm, err := lockFn(context.Background()) // connections and scripts
	if err != nil {
		p.Fatalf("warm-up Lock: %v", err)
	}
	if err := warm(context.Background()); err != nil {
		p.Fatalf("warm-up Unlock: %v", err)
	}
	p.Ready()
	ctx, cancel := context.WithTimeout(context.Background(), spec.Run)
	defer cancel()
	var res lockProcsResult
	for ctx.Err() == nil {
		t0 := time.Now()
		unlock, err := lockFn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				res.Pending = time.Since(t0) // the run is over, not a failure
				break
			}
			p.Fatalf("Lock: %v", err)
		}
		res.Waits = append(res.Waits, time.Since(t0))
		time.Sleep(time.Millisecond)
		if err := unlock(context.Background()); err != nil {
			p.Fatalf("Unlock: %v", err)
		}
	}
	p.Result(res)
}
