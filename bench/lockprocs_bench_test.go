package benchmarks

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/redis/go-redis/v9"
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

// A lockProcsResult is one child's answer: the wait of each acquisition,
// and how long its last Lock had waited in vain when the run ended (a
// starved process's only sample, which the percentiles must not drop).
type lockProcsResult struct {
	Waits   []time.Duration
	Pending time.Duration
	Err     string
}

func runMutexProcs(b *testing.B, addr string, lib mutexLib) {
	run := max(time.Duration(b.N)*time.Millisecond, time.Second)
	name := fmt.Sprintf("bench:procs:%s:%d", lib.name, time.Now().UnixNano())
	start := time.Now().Add(500 * time.Millisecond) // after every child started
	type child struct {
		cmd *exec.Cmd
		dec *json.Decoder
	}
	children := make([]child, lockProcs)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMutexProcsChild$", "-test.bench=^$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			"BENCH_LOCK_LIB="+lib.name, "BENCH_LOCK_REDIS="+addr, "BENCH_LOCK_NAME="+name,
			"BENCH_LOCK_START="+strconv.FormatInt(start.UnixNano(), 10),
			"BENCH_LOCK_STOP="+strconv.FormatInt(start.Add(run).UnixNano(), 10))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		defer cmd.Wait()
		children[i] = child{cmd, json.NewDecoder(bufio.NewReader(out))}
	}
	time.Sleep(time.Until(start))
	cpu0, calls0 := serverCPU(b, addr), serverCalls(b, addr)
	var all []time.Duration
	acquired, most, fewest := 0, 0, math.MaxInt
	for _, c := range children {
		var res lockProcsResult
		if err := c.dec.Decode(&res); err != nil {
			b.Fatalf("read child result: %v", err)
		}
		if res.Err != "" {
			b.Fatalf("child: %s", res.Err)
		}
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

// TestMutexProcsChild is one process of BenchmarkMutexProcs. Run directly
// it does nothing.
func TestMutexProcsChild(t *testing.T) {
	libName := os.Getenv("BENCH_LOCK_LIB")
	if libName == "" {
		t.Skip("only run by BenchmarkMutexProcs")
	}
	i := slices.IndexFunc(mutexLibs, func(l mutexLib) bool { return l.name == libName })
	startNs, err1 := strconv.ParseInt(os.Getenv("BENCH_LOCK_START"), 10, 64)
	stopNs, err2 := strconv.ParseInt(os.Getenv("BENCH_LOCK_STOP"), 10, 64)
	enc := json.NewEncoder(os.Stdout)
	fail := func(err error) {
		_ = enc.Encode(lockProcsResult{Err: err.Error()})
	}
	if i < 0 || err1 != nil || err2 != nil {
		fail(fmt.Errorf("bad child spec %q: %v %v", libName, err1, err2))
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("BENCH_LOCK_REDIS"), PoolSize: 2})
	defer rdb.Close()
	lockFn := mutexLibs[i].newLocker(rdb, os.Getenv("BENCH_LOCK_NAME"), 0)
	warm, err := lockFn(context.Background()) // connections and scripts
	if err != nil {
		fail(err)
		return
	}
	if err := warm(context.Background()); err != nil {
		fail(err)
		return
	}
	time.Sleep(time.Until(time.Unix(0, startNs)))
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, stopNs))
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
			fail(err)
			return
		}
		res.Waits = append(res.Waits, time.Since(t0))
		time.Sleep(time.Millisecond)
		if err := unlock(context.Background()); err != nil {
			fail(err)
			return
		}
	}
	_ = enc.Encode(res)
}
