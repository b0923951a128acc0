package benchmarks

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// lockTTL is the lease every library asks for. No scenario holds a lock
// anywhere near this long, so no lease ever expires during a benchmark.
const lockTTL = 10 * time.Second

// lockWait bounds one Lock call. A Lock that fails is retried and its wait
// keeps counting, so a failure costs a peer in wait time rather than being
// dropped from the figures; failures are reported as "fail/op".
const lockWait = 30 * time.Second

// rotate shifts the order in which each scenario runs the libraries, so that
// over several rounds (run.sh passes the round number) no library always
// runs first or last.
var rotate = flag.Int("rotate", 0, "run the libraries of each scenario starting with the `n`th (mod their number)")

// rotated returns s shifted left by *rotate.
func rotated[T any](s []T) []T {
	k := *rotate % len(s)
	return append(s[k:len(s):len(s)], s[:k]...)
}

// A locker is one goroutine's handle on one named mutex. lock blocks until
// the mutex is held (or fails), and returns the function that releases it.
type locker func(ctx context.Context) (unlock func(context.Context) error, err error)

// A mutexLib adapts one library's mutex to locker.
type mutexLib struct {
	name string // the import path, as the sub-benchmark name
	// how says how the library waits for a held lock: logged, because the
	// contended figures depend on it.
	how string
	// newLocker returns a locker for name. Each goroutine gets its own,
	// since some libraries keep per-acquisition state in the mutex value.
	// i is the goroutine's index, for scenarios where goroutines play
	// different roles (readers and a writer).
	newLocker func(rdb *redis.Client, name string, i int) locker
}

var mutexLibs = []mutexLib{
	{
		name: "dogpile/lock",
		how:  "lock.NewMutex defaults (push wake-up on release, each wait bounded by the holder's PTTL), TTL 10s",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			m := lock.NewMutex(rdb, name, lock.WithTTL(lockTTL))
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := m.Lock(ctx)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		},
	},
	{
		name: "dogpile/lock+fair",
		how:  "lock.NewMutex with lock.WithFair: a FIFO queue in Redis, the head woken by its own message; TTL 10s",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			m := lock.NewMutex(rdb, name, lock.WithTTL(lockTTL), lock.WithFair())
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := m.Lock(ctx)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		},
	},
	{
		name: "bsm/redislock",
		how:  "Obtain with RetryStrategy LinearBackoff(100ms), as in its Example_retry (its default is NoRetry), TTL 10s",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			c := redislock.New(rdb)
			opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)}
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := c.Obtain(ctx, name, lockTTL, opt)
				if err != nil {
					return nil, err
				}
				return l.Release, nil
			}
		},
	},
	{
		name: "go-redsync/redsync",
		how:  "one pool; default retry delay rand(50ms,250ms), tries raised from 32 to unlimited (bounded by ctx), expiry 10s",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			m := redsync.New(goredis.NewPool(rdb)).NewMutex(name,
				redsync.WithExpiry(lockTTL), redsync.WithTries(math.MaxInt32))
			return func(ctx context.Context) (func(context.Context) error, error) {
				if err := m.LockContext(ctx); err != nil {
					return nil, err
				}
				return func(ctx context.Context) error {
					ok, err := m.UnlockContext(ctx)
					if err == nil && !ok {
						err = fmt.Errorf("redsync: unlock of %q not confirmed", name)
					}
					return err
				}, nil
			}
		},
	},
}

// BenchmarkMutex compares Lock+Unlock of dogpile's mutex with its peers on
// one private redis-server, shared by all sub-benchmarks. Each scenario runs
// every library back to back, so their ratios come from the same conditions.
//
//   - uncontended-G1: one goroutine, Lock then Unlock, one name. ns/op is one
//     Lock+Unlock.
//   - uncontended-G16: 16 goroutines, each on its own name. ns/op is the
//     wall time per Lock+Unlock of the whole group (1/throughput).
//   - contended-G8-hold1ms: 8 goroutines on one name, each holding it 1 ms
//     and asking again at once. Reports acquisitions/s, the wait inside
//     Lock (p50, p99, max), and fairness: the most acquisitions any
//     goroutine got divided by the fewest (starved goroutines count as 1
//     and are also reported as "starved"). It also reports how often the
//     goroutine that just released got the lock again at once ("reacq-%",
//     barging), and the handoff time from the start of one goroutine's
//     Unlock to another goroutine's acquisition (p50, p99).
//   - contended-G8-8clients-hold1ms: the same with one redis.Client per
//     goroutine, as if each goroutine were its own process.
//
// Every scenario also reports Redis commands per Lock+Unlock ("cmds/op",
// counted by a client hook; dogpile's SUBSCRIBEs are not included), the
// commands the server executed per Lock+Unlock, scripts' calls included
// ("srv-cmds/op", INFO commandstats), new
// connections per Lock+Unlock ("dials/op", pool and pub/sub), the
// redis-server's CPU time per Lock+Unlock ("srv-µs/op") and the benchmark
// process's ("cli-µs/op", harness included). On a small machine the
// uncontended G16 throughput is bound by their sum.
func BenchmarkMutex(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range mutexLibs {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	for _, sc := range []mutexScenario{
		{name: "uncontended-G1", g: 1},
		{name: "uncontended-G16", g: 16},
		// As users write it (issue 26's outside harness): the client's
		// default pool, no command-counting hook, a new mutex per call.
		{name: "uncontended-G1-as-users-call", g: 1, asUsers: true},
		{name: "uncontended-G16-as-users-call", g: 16, asUsers: true},
		{name: "contended-G8-hold1ms", g: 8, hold: time.Millisecond, same: true, clients: 1},
		{name: "contended-G8-8clients-hold1ms", g: 8, hold: time.Millisecond, same: true, clients: 8},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for _, lib := range rotated(mutexLibs) {
				b.Run(lib.name, func(b *testing.B) {
					runMutex(b, srv.Addr(), lib, sc)
				})
			}
		})
	}
}

// A mutexScenario is g goroutines doing Lock, hold, Unlock in a loop.
type mutexScenario struct {
	name    string
	g       int
	hold    time.Duration
	same    bool // all goroutines lock one name, else one name each
	clients int  // goroutine i uses client i%clients; 0 means 1
	// shared marks a lock that several goroutines may hold at once (a
	// semaphore, readers): barging and handoff are not reported.
	shared bool
	// role, if set, names goroutine i's role; waits are then also
	// reported per role ("<role>-wait-p99-ms").
	role func(i int) string
	// asUsers calls the library as an application does: go-redis's
	// default pool size, no hook, a new locker (lock.NewMutex,
	// redislock.New, redsync's NewMutex) for every Lock.
	asUsers bool
}

// runMutex runs b.N Lock+Unlock cycles spread over g goroutines and reports
// the contention metrics.
func runMutex(b *testing.B, addr string, lib mutexLib, sc mutexScenario) {
	ctx := context.Background()
	g, hold, same := sc.g, sc.hold, sc.same
	// Separate clients stand for separate processes: each has its own
	// connection pool and, for dogpile, its own pub/sub connection.
	var cmds traffic
	clients := make([]*redis.Client, max(sc.clients, 1))
	for i := range clients {
		o := &redis.Options{Addr: addr, PoolSize: 2*g/len(clients) + 1}
		if sc.asUsers {
			o.PoolSize = 0 // go-redis's default
		}
		clients[i] = redis.NewClient(o)
		defer clients[i].Close()
		if !sc.asUsers {
			countCommands(clients[i], &cmds)
		}
	}
	name := fmt.Sprintf("bench:%s:%s:%d", sc.name, lib.name, time.Now().UnixNano())
	lockers := make([]locker, g)
	var warm sync.WaitGroup
	for i := range lockers {
		n := name
		if !same {
			n = fmt.Sprintf("%s:%d", name, i)
		}
		lockers[i] = lib.newLocker(clients[i%len(clients)], n, i)
		if sc.asUsers {
			rdb := clients[i%len(clients)]
			lockers[i] = func(ctx context.Context) (func(context.Context) error, error) {
				return lib.newLocker(rdb, n, i)(ctx)
			}
		}
		// Warm up all at once: open as many connections as goroutines
		// and load the scripts, so that the timed part, however short,
		// measures steady state.
		warm.Go(func() {
			unlock, err := lockers[i](ctx)
			if err != nil {
				b.Errorf("warm-up Lock: %v", err)
				return
			}
			if err := unlock(ctx); err != nil {
				b.Errorf("warm-up Unlock: %v", err)
			}
		})
	}
	warm.Wait()
	if b.Failed() {
		b.FailNow()
	}

	var (
		tickets  atomic.Int64 // claimed acquisitions, up to b.N
		failures atomic.Int64
		waits    = make([][]time.Duration, g) // per goroutine
		// With one name, the lock orders acquisitions: last is the
		// goroutine that acquired most recently, released when it began
		// to release (unix ns), so the next holder can measure the
		// handoff, from release to its own acquisition.
		last, released atomic.Int64
		repeats        atomic.Int64
		handoffs       = make([][]time.Duration, g)
		start          sync.WaitGroup
		wg             sync.WaitGroup
	)
	start.Add(1)
	for i := range g {
		wg.Go(func() {
			start.Wait()
			for tickets.Add(1) <= int64(b.N) {
				t0 := time.Now()
				var unlock func(context.Context) error
				for {
					lctx, cancel := context.WithTimeout(ctx, lockWait)
					var err error
					unlock, err = lockers[i](lctx)
					cancel()
					if err == nil {
						break
					}
					failures.Add(1)
					if time.Since(t0) > 2*lockWait {
						b.Errorf("Lock: giving up after %v: %v", time.Since(t0), err)
						return
					}
				}
				now := time.Now()
				waits[i] = append(waits[i], now.Sub(t0))
				if same && !sc.shared {
					if last.Swap(int64(i)) == int64(i) {
						repeats.Add(1)
					} else if r := released.Load(); r != 0 {
						handoffs[i] = append(handoffs[i], time.Duration(now.UnixNano()-r))
					}
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				if same && !sc.shared {
					released.Store(time.Now().UnixNano())
				}
				if err := unlock(ctx); err != nil {
					b.Errorf("Unlock: %v", err)
					return
				}
			}
		})
	}
	cmds0, dials0 := cmds.cmds.Load(), cmds.dials.Load()
	cpu0, cli0 := serverCPU(b, addr), processCPU()
	calls0 := serverCalls(b, addr)
	b.ResetTimer()
	t0 := time.Now()
	start.Done()
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cli0)/float64(time.Microsecond)/float64(b.N), "cli-µs/op")
	b.ReportMetric(float64(cmds.cmds.Load()-cmds0)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(cmds.dials.Load()-dials0)/float64(b.N), "dials/op")
	b.ReportMetric(float64(serverCPU(b, addr)-cpu0)/float64(time.Microsecond)/float64(b.N), "srv-µs/op")
	// Less the INFO calls of serverCPU and serverCalls in between.
	b.ReportMetric(float64(serverCalls(b, addr)-calls0-2)/float64(b.N), "srv-cmds/op")

	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	b.ReportMetric(float64(failures.Load())/float64(b.N), "fail/op")
	if !same {
		return
	}
	var all, hand []time.Duration
	most, fewest, starved := 0, math.MaxInt, 0
	for i, w := range waits {
		all = append(all, w...)
		hand = append(hand, handoffs[i]...)
		most = max(most, len(w))
		fewest = min(fewest, max(len(w), 1))
		if len(w) == 0 {
			starved++
		}
	}
	slices.Sort(all)
	slices.Sort(hand)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(all, 0.50)), "wait-p50-ms")
	b.ReportMetric(ms(percentile(all, 0.99)), "wait-p99-ms")
	b.ReportMetric(ms(percentile(all, 1)), "wait-max-ms")
	b.ReportMetric(float64(most)/float64(fewest), "fairness")
	b.ReportMetric(float64(starved), "starved")
	if !sc.shared {
		b.ReportMetric(100*float64(repeats.Load())/float64(b.N), "reacq-%")
		b.ReportMetric(ms(percentile(hand, 0.50)), "handoff-p50-ms")
		b.ReportMetric(ms(percentile(hand, 0.99)), "handoff-p99-ms")
		b.ReportMetric(ms(percentile(hand, 1)), "handoff-max-ms")
	}
	if sc.role == nil {
		return
	}
	byRole := map[string][]time.Duration{}
	mostR, fewestR := map[string]int{}, map[string]int{}
	for i, w := range waits {
		r := sc.role(i)
		byRole[r] = append(byRole[r], w...)
		mostR[r] = max(mostR[r], len(w))
		if f, ok := fewestR[r]; !ok || len(w) < f {
			fewestR[r] = len(w)
		}
	}
	for r, w := range byRole {
		slices.Sort(w)
		b.ReportMetric(ms(percentile(w, 0.50)), r+"-wait-p50-ms")
		b.ReportMetric(ms(percentile(w, 0.99)), r+"-wait-p99-ms")
		b.ReportMetric(float64(len(w))/float64(b.N)*100, r+"-share-%")
		b.ReportMetric(float64(mostR[r])/float64(max(fewestR[r], 1)), r+"-fairness")
	}
}

// percentile returns the q-quantile of sorted (nearest rank), 0 if empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
