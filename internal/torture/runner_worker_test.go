package torture

// runner_worker_test.go is a worker process: the test binary re-executed
// by redistest.StartChild, running goroutines of random cache calls
// (runner_cachework_test.go) and lock sections (runner_lockwork_test.go)
// until the parent says stop, recording each in its ledger.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// workerMode is the child mode of a worker process.
const workerMode = "torture-worker"

const (
	// computeLease is the caches' compute lease (WithLease): a stopped
	// process is taken over within it.
	computeLease = time.Second
	// opTimeout bounds each call a worker makes.
	opTimeout = 3 * time.Second
	// downTimeout bounds a Fetch of a Cache WithStaleIfDown: a short
	// deadline, as its users give, so that the goroutines are free to call
	// again once the circuit has opened under a stopped server (a call in
	// flight then waits for its deadline) and meet the kept copies.
	downTimeout = 500 * time.Millisecond
	// leakWait bounds how long a worker waits, after closing everything,
	// for its goroutines to be back to the baseline: the lock package's
	// background releases take up to 3 s.
	leakWait = 5 * time.Second
)

// ChildModes returns the modes of this package's child processes, for
// redistest.ChildMain in the TestMain of the test that runs them.
func ChildModes() map[string]func(*redistest.Parent) {
	return map[string]func(*redistest.Parent){workerMode: runWorker}
}

// A Value is what the workers cache: a version, drawn from the oracle's
// counter (so versions of all processes are totally ordered), for a key,
// by a writer.
type Value struct {
	K string `msgpack:"k"`
	V int64  `msgpack:"v"`
	P int    `msgpack:"p"`
	G int    `msgpack:"g"`
}

// WorkerParams is what the parent tells a worker process.
type WorkerParams struct {
	Plan    Plan
	Proc    int
	Addrs   []string // the server, or the cluster's nodes
	Cluster bool
	Oracle  string // the unfaulted server whose counter draws versions
	Ledger  string // the ledger file
}

// WorkerResult is what a worker process reports once stopped.
type WorkerResult struct {
	Ops    map[string]int // ended ops by kind
	Errors map[string]int // of which failed, by kind
	Stats  []dogpile.Stats
	Leak   string // goroutines left after closing everything, if any
}

// A worker is one worker process.
type worker struct {
	plan   Plan
	proc   int
	rdb    redis.UniversalClient
	oracle *redis.Client
	led    *Ledger
	caches []*dogpile.Cache[Value]
	seq    atomic.Int64

	mu  sync.Mutex // guards res
	res WorkerResult
}

func runWorker(parent *redistest.Parent) {
	var wp WorkerParams
	parent.Params(&wp)
	baseline := goleak.IgnoreCurrent()
	w, err := newWorker(wp)
	if err != nil {
		parent.Fatalf("%v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	parent.Ready()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for parent.Scan() && parent.Text() != "stop" {
		}
		stop()
	}()
	var wg sync.WaitGroup
	for g := 1; g <= w.plan.Workers; g++ {
		wg.Go(func() { w.cacheLoop(ctx, g) })
	}
	for g := w.plan.Workers + 1; g <= w.plan.Workers+w.plan.Lockers; g++ {
		wg.Go(func() { w.lockLoop(ctx, g) })
	}
	wg.Go(func() { w.watchStalls(ctx) })
	wg.Wait()
	<-stopped
	w.close()
	w.res.Leak = leftover(baseline)
	parent.Result(w.res)
}

func newWorker(wp WorkerParams) (*worker, error) {
	led, err := OpenLedger(wp.Ledger)
	if err != nil {
		return nil, err
	}
	w := &worker{plan: wp.Plan, proc: wp.Proc, led: led,
		res: WorkerResult{Ops: map[string]int{}, Errors: map[string]int{}}}
	if wp.Cluster {
		w.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: wp.Addrs, ContextTimeoutEnabled: true})
	} else {
		w.rdb = redis.NewClient(&redis.Options{Addr: wp.Addrs[0], ContextTimeoutEnabled: true})
	}
	w.oracle = redis.NewClient(&redis.Options{Addr: wp.Oracle})
	for i, c := range w.plan.Caches {
		opts := []dogpile.Option{dogpile.WithPrefix(c.Prefix), dogpile.WithLease(computeLease), dogpile.WithDefaultTTL(c.TTL)}
		if c.Stale > 0 {
			opts = append(opts, dogpile.WithStale(c.Stale))
		}
		if c.Early > 0 {
			opts = append(opts, dogpile.WithEarlyRefresh(c.Early))
		}
		if c.Neg > 0 {
			opts = append(opts, dogpile.WithNegativeTTL(c.Neg))
		}
		if w.plan.near(i, w.proc) {
			opts = append(opts, dogpile.WithNearCache(4*w.plan.Keys))
		}
		if c.Soft > 0 {
			opts = append(opts, dogpile.WithSoftTimeout(c.Soft))
		}
		if c.StaleIfDown {
			opts = append(opts, dogpile.WithStaleIfDown())
		}
		opts = append(opts, dogpile.WithObserver(markDown))
		w.caches = append(w.caches, dogpile.New[Value](w.rdb, opts...))
	}
	return w, nil
}

func (w *worker) close() {
	for _, c := range w.caches {
		_ = c.Close()
		w.res.Stats = append(w.res.Stats, c.Stats())
	}
	_ = w.rdb.Close()
	_ = w.oracle.Close()
	_ = w.led.Close()
}

// leftover returns the goroutines running beyond baseline, after waiting
// up to leakWait for them to end; "" if none.
func leftover(baseline goleak.Option) string {
	var err error
	for deadline := time.Now().Add(leakWait); time.Now().Before(deadline); {
		if err = goleak.Find(baseline); err == nil { // Find itself retries for a while
			return ""
		}
	}
	return err.Error()
}

// rng returns goroutine g's random source: one per goroutine, drawn from
// the seed, so that a seed replays each goroutine's choices.
func (w *worker) rng(g int) *rand.Rand {
	return rand.New(rand.NewPCG(w.plan.Seed, uint64(w.proc)<<16|uint64(g)))
}

// newOp starts an op of goroutine g, without writing it yet.
func (w *worker) newOp(g int, kind string, cfg int, keys ...string) *Op {
	return &Op{ID: int64(w.proc)<<32 | w.seq.Add(1), Proc: w.proc, G: g, Kind: kind, Cfg: cfg, Keys: keys,
		Start: time.Now().UnixNano()}
}

// begin starts an op of goroutine g and writes its first phase.
func (w *worker) begin(g int, kind string, cfg int, keys ...string) *Op {
	op := w.newOp(g, kind, cfg, keys...)
	w.led.Write(op)
	return op
}

// end ends op with err and writes its last phase.
func (w *worker) end(op *Op, err error) {
	op.End = time.Now().UnixNano()
	if err != nil {
		op.Err = err.Error()
	}
	w.led.Write(op)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.Ops[op.Kind]++
	if err != nil {
		w.res.Errors[op.Kind]++
	}
}

// draw takes n consecutive versions from the oracle and returns the first.
func (w *worker) draw(n int) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	top, err := w.oracle.IncrBy(ctx, "torture:version", int64(n)).Result()
	if err != nil {
		return 0, fmt.Errorf("draw a version: %w", err)
	}
	return top - int64(n) + 1, nil
}

// sleep waits d or until ctx is done, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stallTick is the period of the ticker that finds stalls (see KStall).
const stallTick = 10 * time.Millisecond

// watchStalls records each time this process's goroutines ran more than
// StallMin late, until ctx ends: a starved CPU (the suite's other packages
// on two cores) delays a goroutine's seeing its lease's Done as a stopped
// process does, which the lock package does not promise to survive.
func (w *worker) watchStalls(ctx context.Context) {
	redistest.WatchStalls(ctx, stallTick, StallMin, func(due, ran time.Time) {
		op := w.newOp(0, KStall, 0)
		op.Start, op.End = due.UnixNano(), ran.UnixNano()
		w.led.Write(op)
	})
}
