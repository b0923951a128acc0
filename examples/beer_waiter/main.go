// Command beer_waiter is the classic lock demo: many waiters, spread over
// one or more processes, all try to get a beer from the one tap (a
// [github.com/dogpile-go/dogpile/lock.Mutex]) within a timeout. Whoever gets the tap drinks for a while
// and gives it back; the rest wait, and some give up.
//
// It checks, for real, what the mutex promises: a counter in Redis that
// every holder increments on taking the tap and decrements on leaving it
// never exceeds 1, the hold intervals (by the server's clock) never overlap,
// and the fencing numbers strictly increase in the order the tap was held.
//
//	go run ./examples/beer_waiter                    # 15 waiters, one process
//	go run ./examples/beer_waiter -procs 3           # the same 15 over 3 processes
//	go run ./examples/beer_waiter -procs 3 -plot tap.svg   # and a picture of the holds
//	go run ./examples/beer_waiter -redis redis://:pw@host:6379/0 -json
//	go run ./examples/beer_waiter -memcache 127.0.0.1:11211
//
// With -memcache the tap is a lock/memcache Mutex and the counters are
// memcached's: the same checks, except fencing, which memcached lacks, and
// hold times from the local clock instead of the server's.
//
// Without -redis or REDIS_URL it uses localhost:6379 if a Redis answers
// there, and otherwise an embedded miniredis.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// config is everything run needs; main fills it from flags.
type config struct {
	Redis    string        // URL, host:port or comma-separated cluster addresses; "" probes
	Memcache string        // memcached address(es), comma-separated: use it instead of Redis
	Probe    string        // address tried when Redis is empty
	Waiters  int           // total, over all processes
	Procs    int           // worker processes; 1 runs in this process
	Timeout  time.Duration // how long a waiter waits before giving up
	DrinkMin time.Duration
	DrinkMax time.Duration
	TTL      time.Duration // lock lease TTL (the seeds' autorelease)
	Stagger  time.Duration // waiter i arrives at (i-1)×Stagger, so arrival order is known
	Tap      string        // lock name
	Fair     bool          // serve waiters first come, first served
	JSON     bool
	Plot     string    // file to write the SVG picture of the holds to; "" for none
	Seed     uint64    // 0: random
	Progress io.Writer // progress lines; nil for none
	Exe      string    // worker executable; default this one
}

func defaultConfig() config {
	return config{
		Probe:    demo.DefaultProbe,
		Waiters:  15,
		Procs:    1,
		Timeout:  3 * time.Second,
		DrinkMin: 100 * time.Millisecond,
		DrinkMax: 700 * time.Millisecond,
		TTL:      5 * time.Second,
		Stagger:  10 * time.Millisecond,
		Tap:      "examples:beer-tap",
	}
}

func main() {
	if demo.IsWorker() {
		os.Exit(demo.ServeWorker(drinkers))
	}
	cfg := defaultConfig()
	server := demo.ServerFlags()
	flag.IntVar(&cfg.Waiters, "n", cfg.Waiters, "number of waiters, over all processes")
	flag.IntVar(&cfg.Procs, "procs", cfg.Procs, "number of worker processes sharing the tap (1: this process)")
	flag.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "how long a waiter waits for the tap before giving up")
	flag.DurationVar(&cfg.DrinkMin, "drink-min", cfg.DrinkMin, "shortest drink")
	flag.DurationVar(&cfg.DrinkMax, "drink-max", cfg.DrinkMax, "longest drink")
	flag.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "lock lease TTL: a crashed drinker frees the tap after this long")
	flag.DurationVar(&cfg.Stagger, "stagger", cfg.Stagger, "waiter i arrives at (i-1)×stagger, so first come, first served can be checked (0: all at once)")
	flag.StringVar(&cfg.Tap, "tap", cfg.Tap, "lock name")
	flag.BoolVar(&cfg.Fair, "fair", false, "serve waiters first come, first served (lock.WithFair), and check that nobody is overtaken")
	flag.StringVar(&cfg.Memcache, "memcache", "", "memcached `address`(es), comma-separated: run on memcached (lock/memcache) instead of Redis")
	flag.BoolVar(&cfg.JSON, "json", false, "write the results as JSON")
	flag.StringVar(&cfg.Plot, "plot", "", "write an SVG picture of who waited and who drank when to `file`")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "random seed for drink times (0: random)")
	flag.Parse()
	cfg.Redis, cfg.Probe = server()
	cfg.Progress = os.Stderr
	demo.Main("beer_waiter", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

// task is one process's share of the waiters.
type task struct {
	RunID    string        `json:"run_id"`
	Proc     int           `json:"proc"`
	Waiters  []int         `json:"waiters"`
	Tap      string        `json:"tap"`
	Timeout  time.Duration `json:"timeout"`
	DrinkMin time.Duration `json:"drink_min"`
	DrinkMax time.Duration `json:"drink_max"`
	TTL      time.Duration `json:"ttl"`
	Stagger  time.Duration `json:"stagger"`
	Fair     bool          `json:"fair"`
	Seed     uint64        `json:"seed"`
	Memcache string        `json:"memcache,omitempty"`
}

// waiter is what happened to one waiter.
type waiter struct {
	ID     int           `json:"id"`
	Proc   int           `json:"proc"`
	Served bool          `json:"served"`
	Wait   time.Duration `json:"wait_ns"`
	Arrive int64         `json:"arrive_us"`        // local clock (µs) when it asked for the tap
	Asked  int64         `json:"asked_us"`         // local clock (µs) by which the server had it in line (see asked.go)
	Got    int64         `json:"got_us,omitempty"` // local clock (µs) when it got the tap
	Drink  time.Duration `json:"drink_ns,omitempty"`
	Fence  int64         `json:"fence,omitempty"`
	Seq    int64         `json:"seq,omitempty"`      // hold order, from a counter incremented under the lock
	Count  int64         `json:"holders,omitempty"`  // holders counted on taking the tap, itself included
	Enter  int64         `json:"enter_us,omitempty"` // server time (µs) after taking the tap
	Leave  int64         `json:"leave_us,omitempty"` // server time (µs) before giving it back
	Lost   bool          `json:"lost,omitempty"`     // the lease ended while drinking
	Err    string        `json:"error,omitempty"`
}

// keys are the measuring keys of one run; one hash tag, so one cluster slot.
type keys struct{ holders, maxHolders, seq string }

func runKeys(runID string) keys {
	p := "examples:beer_waiter:{" + runID + "}:"
	return keys{p + "holders", p + "max-holders", p + "seq"}
}

func (k keys) list() []string { return []string{k.holders, k.maxHolders, k.seq} }

// enterScript counts a holder in, remembers the most holders ever seen at
// once, numbers the hold, and returns (holders, seq, server seconds, µs).
var enterScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
local m = tonumber(redis.call('GET', KEYS[2]) or '0')
if n > m then redis.call('SET', KEYS[2], n) end
local s = redis.call('INCR', KEYS[3])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
local t = redis.call('TIME')
return {n, s, tonumber(t[1]), tonumber(t[2])}
`)

// leaveScript counts a holder out and returns the server time.
var leaveScript = redis.NewScript(`
redis.call('DECR', KEYS[1])
local t = redis.call('TIME')
return {tonumber(t[1]), tonumber(t[2])}
`)

const keyTTL = 600 // seconds the measuring keys outlive a crashed run

func run(ctx context.Context, cfg config, w io.Writer) error {
	switch {
	case cfg.Waiters < 1:
		return errors.New("-n must be at least 1")
	case cfg.Procs < 1:
		return errors.New("-procs must be at least 1")
	case cfg.Procs > cfg.Waiters:
		return fmt.Errorf("-procs %d is more than the %d waiters", cfg.Procs, cfg.Waiters)
	case cfg.DrinkMin <= 0 || cfg.DrinkMax < cfg.DrinkMin:
		return errors.New("need 0 < -drink-min <= -drink-max")
	case cfg.TTL <= cfg.DrinkMax:
		return fmt.Errorf("-ttl %v must be longer than -drink-max %v, or drinkers lose the tap mid-drink", cfg.TTL, cfg.DrinkMax)
	case cfg.Timeout <= 0:
		return errors.New("-timeout must be positive")
	case cfg.Stagger < 0:
		return errors.New("-stagger must not be negative")
	case cfg.Memcache != "" && cfg.Fair:
		return errors.New("-fair needs Redis: lock/memcache has no fair mutex")
	case cfg.Memcache != "" && cfg.TTL < time.Second:
		return errors.New("-ttl must be at least 1s on memcached (whole-second expiries)")
	}
	status := demo.NewStatusLine(cfg.Progress)
	// The embedded-server notice goes with the progress lines under -json,
	// so that w holds nothing but JSON.
	notice := w
	if cfg.JSON {
		notice = io.Discard
		if cfg.Progress != nil {
			notice = cfg.Progress
		}
	}
	var conn *demo.Conn // nil on memcached
	if cfg.Memcache == "" {
		var err error
		if conn, err = demo.Connect(ctx, cfg.Redis, cfg.Probe, notice); err != nil {
			return err
		}
		defer conn.Close()
	}

	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	tasks := make([]task, cfg.Procs)
	for p := range tasks {
		tasks[p] = task{RunID: runID, Proc: p, Tap: cfg.Tap, Timeout: cfg.Timeout, DrinkMin: cfg.DrinkMin,
			DrinkMax: cfg.DrinkMax, TTL: cfg.TTL, Stagger: cfg.Stagger, Fair: cfg.Fair, Seed: seed + uint64(p),
			Memcache: cfg.Memcache}
	}
	for i := range cfg.Waiters {
		tasks[i%cfg.Procs].Waiters = append(tasks[i%cfg.Procs].Waiters, i+1)
	}
	if !cfg.JSON {
		fmt.Fprintf(w, "%d waiters in %d process(es) want a beer from one tap (lock %q on %s); each gives up after %v\n",
			cfg.Waiters, cfg.Procs, cfg.Tap, serverName(cfg, conn), cfg.Timeout)
	}
	k := runKeys(runID)
	if conn != nil {
		defer conn.Client.Del(context.WithoutCancel(ctx), k.list()...)
	} else {
		cleanup, err := initMemcache(cfg.Memcache, k)
		if err != nil {
			return fmt.Errorf("memcached %s: %w", cfg.Memcache, err)
		}
		defer cleanup()
	}

	start := time.Now()
	fleet := demo.Fleet{
		Conn:     conn,
		Procs:    cfg.Procs,
		Exe:      cfg.Exe,
		Counters: []string{"served", "gave_up"},
		Progress: func(d time.Duration, c map[string]int64) {
			status.Set(fmt.Sprintf("%4.1fs  %d served, %d gave up, %d still waiting or drinking",
				d.Seconds(), c["served"], c["gave_up"], int64(cfg.Waiters)-c["served"]-c["gave_up"]))
		},
	}
	// Every wait and drink is bounded, so a run that takes much longer is
	// stuck: fail it rather than hang.
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout+cfg.DrinkMax+time.Minute)
	defer cancel()
	results, err := demo.Run(rctx, fleet, tasks, drinkers)
	status.Clear()
	if err != nil {
		return err
	}
	var all []waiter
	for _, r := range results {
		all = append(all, r...)
	}
	maxHolders, err := maxHolders(ctx, conn, k, all)
	if err != nil {
		return err
	}
	rep := summarize(cfg, all, maxHolders, time.Since(start))
	rep.Server = serverName(cfg, conn)
	if cfg.Plot != "" {
		if err := writePlot(cfg.Plot, cfg, rep); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(notice, "wrote %s\n", cfg.Plot)
	}
	if cfg.JSON {
		if err := demo.WriteJSON(w, rep); err != nil {
			return err
		}
	} else {
		printReport(w, rep)
	}
	if len(rep.Failures) > 0 {
		return fmt.Errorf("the tap was not exclusive: %v", rep.Failures)
	}
	return nil
}

// drinkers runs one process's waiters.
func drinkers(ctx context.Context, c *demo.Conn, t task, progress *demo.Counters) ([]waiter, error) {
	var st store
	if t.Memcache != "" {
		st = memcacheStore(t)
	} else {
		st = redisStore(c, t)
	}
	defer st.close()
	out := make([]waiter, len(t.Waiters))
	var wg sync.WaitGroup
	for i, id := range t.Waiters {
		rng := rand.New(rand.NewPCG(t.Seed, uint64(id)))
		drink := t.DrinkMin + time.Duration(rng.Int64N(int64(t.DrinkMax-t.DrinkMin)+1))
		wg.Go(func() {
			// Arrive in id order; every process got the start signal at
			// the same moment, so the order holds across processes.
			select {
			case <-time.After(time.Duration(id-1) * t.Stagger):
			case <-ctx.Done():
			}
			out[i] = wait(ctx, st, id, t.Proc, drink)
			if out[i].Served {
				progress.Add("served", 1)
			} else {
				progress.Add("gave_up", 1)
			}
		})
	}
	wg.Wait()
	return out, ctx.Err()
}

// wait is one waiter: wait for the tap, drink, give it back.
func wait(ctx context.Context, st store, id, proc int, drink time.Duration) waiter {
	start := time.Now()
	x := waiter{ID: id, Proc: proc, Arrive: start.UnixMicro()}
	lease, err := st.lock(ctx)
	x.Wait = time.Since(start)
	x.Got = start.Add(x.Wait).UnixMicro()
	// Unknown (memcached, or no reply): by the time Lock returned, the
	// waiter had certainly asked.
	x.Asked = cmp.Or(lease.asked, x.Got)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return x // gave up
	}
	if err != nil {
		x.Err = err.Error()
		return x
	}
	defer func() {
		if err := lease.unlock(ctx); err != nil && x.Err == "" {
			x.Err = "unlock: " + err.Error()
		}
	}()
	x.Served, x.Fence, x.Drink = true, lease.fence, drink
	in, err := st.enter(ctx)
	if err != nil {
		x.Err = "count in: " + err.Error()
		return x
	}
	x.Count, x.Seq, x.Enter = in.holders, in.seq, in.at
	select {
	case <-time.After(drink):
	case <-lease.done:
		x.Lost = true
	case <-ctx.Done():
	}
	if x.Leave, err = st.leave(context.WithoutCancel(ctx)); err != nil {
		x.Err = "count out: " + err.Error()
	}
	return x
}

// maxHolders is the most holders counted at once: Redis keeps the maximum
// itself; on memcached it is the largest count a holder saw on entering.
func maxHolders(ctx context.Context, conn *demo.Conn, k keys, all []waiter) (int64, error) {
	if conn != nil {
		n, err := conn.Client.Get(ctx, k.maxHolders).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("read max holders: %w", err)
		}
		return n, nil
	}
	var n int64
	for _, x := range all {
		n = max(n, x.Count)
	}
	return n, nil
}
