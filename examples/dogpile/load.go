package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// task is one process's share of a mode's load.
type task struct {
	Prefix     string        `json:"prefix"` // of every Redis key of this mode's run
	Proc       int           `json:"proc"`
	Mode       string        `json:"mode"`
	Goroutines int           `json:"goroutines"`
	Keys       int           `json:"keys"`
	Compute    time.Duration `json:"compute"`
	TTL        time.Duration `json:"ttl"`
	Duration   time.Duration `json:"duration"`
	Think      time.Duration `json:"think"`
	Debug      string        `json:"debug,omitempty"` // address to serve the debug page at, or ""
}

// result is what one process saw.
type result struct {
	Calls     int64             `json:"calls"`
	Hits      int64             `json:"hits"`      // the value was there before the call began
	Waited    int64             `json:"waited"`    // the value was computed during the call, by someone else
	Computed  int64             `json:"computed"`  // the call ran compute itself and got its value
	Refreshed int64             `json:"refreshed"` // computes whose value no call waited for: background refreshes
	Errors    int64             `json:"errors"`
	FirstErr  string            `json:"first_error,omitempty"`
	Commands  int64             `json:"commands"` // sent by the cache's client
	Latency   demo.Histogram    `json:"latency"`
	Steady    demo.Histogram    `json:"latency_after_first_ttl"` // calls that began one TTL after the start: the first fills are done
	WakeLag   demo.Histogram    `json:"wake_lag"`                // for waited calls: return time − when the value was computed
	Starts    [][]int64         `json:"compute_starts"`          // per key, unix µs
	Start     int64             `json:"start_us"`                // unix µs when the calls began
	Timeline  demo.Series       `json:"timeline"`                // latency of the calls that began in each step
	Elapsed   time.Duration     `json:"elapsed"`
	Library   map[string]uint64 `json:"library_stats,omitempty"`
	HotKeys   []hotKey          `json:"hot_keys,omitempty"` // the library's, every key, at the end
}

// hotKey is a line of dogpile.Cache.HotKeys, named for JSON.
type hotKey struct {
	Key      string `json:"key"`
	Reads    uint64 `json:"reads"` // estimated: hits are sampled
	Misses   uint64 `json:"misses"`
	Computes uint64 `json:"computes"`
	Waits    uint64 `json:"waits"`
}

// value is what the expensive compute produces.
type value struct {
	Key        string `json:"key" msgpack:"key"`
	Gen        int64  `json:"gen" msgpack:"gen"`                 // the compute counter after this compute
	ComputedAt int64  `json:"computed_at" msgpack:"computed_at"` // unix µs when compute returned
}

// A fetcher is one caching strategy.
type fetcher interface {
	// fetch returns key's value, calling compute on a miss.
	fetch(ctx context.Context, key string, compute func(context.Context) (value, error)) (value, error)
	// stats returns the library's own counters, or nil.
	stats() map[string]uint64
	// cache returns the library's Cache, or nil.
	cache() dogpile.AnyCache
}

func newFetcher(mode string, client redis.UniversalClient, prefix string, ttl time.Duration) (fetcher, error) {
	switch mode {
	case "naive":
		return &naive{client: client, ttl: ttl}, nil
	case "singleflight":
		return &flighted{naive: naive{client: client, ttl: ttl}}, nil
	case "dogpile":
		return newDogpile(client, prefix, ttl), nil
	case "fresh":
		return newFresh(client, prefix, ttl), nil
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

// naive is cache-aside: GET; on a miss, compute and SET with the TTL.
type naive struct {
	client redis.UniversalClient
	ttl    time.Duration
}

func (n *naive) fetch(ctx context.Context, key string, compute func(context.Context) (value, error)) (value, error) {
	var v value
	b, err := n.client.Get(ctx, key).Bytes()
	if err == nil {
		err = json.Unmarshal(b, &v)
		return v, err
	}
	if err != redis.Nil {
		return v, err
	}
	return n.fill(ctx, key, compute)
}

func (n *naive) fill(ctx context.Context, key string, compute func(context.Context) (value, error)) (value, error) {
	v, err := compute(ctx)
	if err != nil {
		return v, err
	}
	b, _ := json.Marshal(v)
	return v, n.client.Set(ctx, key, b, n.ttl).Err()
}

func (n *naive) stats() map[string]uint64 { return nil }

func (n *naive) cache() dogpile.AnyCache { return nil }

// flighted is naive with singleflight around the miss: concurrent misses
// for a key in this process share one compute and SET. Other processes
// know nothing of it.
type flighted struct {
	naive
	g singleflight.Group
}

func (f *flighted) fetch(ctx context.Context, key string, compute func(context.Context) (value, error)) (value, error) {
	var v value
	b, err := f.client.Get(ctx, key).Bytes()
	if err == nil {
		err = json.Unmarshal(b, &v)
		return v, err
	}
	if err != redis.Nil {
		return v, err
	}
	r, err, _ := f.g.Do(key, func() (any, error) { return f.fill(ctx, key, compute) })
	return r.(value), err
}

// load runs one process's goroutines against one fetcher for the task's
// duration.
func load(ctx context.Context, c *demo.Conn, t task, progress *demo.Counters) (result, error) {
	// The cache's client is counted; the meter's (compute counter) is not,
	// so "commands per call" is the cache strategy's own cost.
	cacheClient := c.Client
	if c.URL != "" {
		cl, _, err := demo.NewClient(c.URL)
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		cacheClient = cl
	}
	var cmds demo.CmdCounter
	cacheClient.AddHook(&cmds)
	f, err := newFetcher(t.Mode, cacheClient, t.Prefix, t.TTL)
	if err != nil {
		return result{}, err
	}
	if c := f.cache(); c != nil && t.Debug != "" {
		stop, err := serveDebug(t.Debug, c)
		if err != nil {
			return result{}, err
		}
		defer stop()
	}

	var (
		startsMu sync.Mutex
		starts   = make([][]int64, t.Keys)
	)
	var ran atomic.Int64 // computes run in this process
	// self receives the generation of the value the call's own compute made:
	// a background refresh runs a compute of a call that has already
	// returned with the previous value.
	computeFor := func(k int, key string, self *atomic.Int64) func(context.Context) (value, error) {
		return func(ctx context.Context) (value, error) {
			startsMu.Lock()
			starts[k] = append(starts[k], time.Now().UnixMicro())
			startsMu.Unlock()
			progress.Add("computes", 1)
			gen, err := c.Client.Incr(ctx, t.Prefix+"computes").Result()
			if err != nil {
				return value{}, err
			}
			// Counted once the Redis counter has it: the parent reads that
			// counter after this process's report, so a background refresh
			// that started just before the report (its INCR still on the
			// way on a loaded machine) cannot make ran exceed it.
			ran.Add(1)
			self.Store(gen)
			tm := time.NewTimer(t.Compute)
			defer tm.Stop()
			select {
			case <-tm.C:
			case <-ctx.Done():
				return value{}, ctx.Err()
			}
			return value{Key: key, Gen: gen, ComputedAt: time.Now().UnixMicro()}, nil
		}
	}

	res := make([]result, t.Goroutines)
	start := time.Now()
	stopAt := start.Add(t.Duration)
	var wg sync.WaitGroup
	for g := range res {
		r := &res[g]
		r.Timeline.Step = timelineStep
		wg.Go(func() {
			for time.Now().Before(stopAt) && ctx.Err() == nil {
				k := rand.N(t.Keys)
				key := t.Prefix + "k" + fmt.Sprint(k)
				var self atomic.Int64
				t0 := time.Now()
				v, err := f.fetch(ctx, key, computeFor(k, key, &self))
				t1 := time.Now()
				r.Calls++
				progress.Add("calls", 1)
				r.Latency.Record(t1.Sub(t0))
				r.Timeline.Record(t0.Sub(start), t1.Sub(t0))
				if t0.Sub(start) >= t.TTL {
					r.Steady.Record(t1.Sub(t0))
				}
				switch {
				case err != nil:
					r.Errors++
					progress.Add("errors", 1)
					if r.FirstErr == "" {
						r.FirstErr = err.Error()
					}
				case v.Gen != 0 && v.Gen == self.Load():
					r.Computed++
				case v.ComputedAt < t0.UnixMicro():
					r.Hits++
				default:
					r.Waited++
					r.WakeLag.Record(t1.Sub(time.UnixMicro(v.ComputedAt)))
				}
				if t.Think > 0 {
					time.Sleep(t.Think)
				}
			}
		})
	}
	wg.Wait()
	total := result{Elapsed: time.Since(start), Commands: cmds.Load(), Library: f.stats(),
		Start: start.UnixMicro(), Timeline: demo.Series{Step: timelineStep}}
	if c := f.cache(); c != nil {
		// Every key, not the top few: a key the parent shows may be below
		// the top of one process (the sums would leave that process out).
		for _, h := range c.HotKeys(t.Keys) {
			total.HotKeys = append(total.HotKeys, hotKey(h))
		}
	}
	startsMu.Lock() // a background refresh may still be starting
	for _, s := range starts {
		total.Starts = append(total.Starts, slices.Clone(s))
	}
	startsMu.Unlock()
	for _, r := range res {
		total.Calls += r.Calls
		total.Hits += r.Hits
		total.Waited += r.Waited
		total.Computed += r.Computed
		total.Errors += r.Errors
		if total.FirstErr == "" {
			total.FirstErr = r.FirstErr
		}
		total.Latency.Merge(r.Latency)
		total.Steady.Merge(r.Steady)
		total.WakeLag.Merge(r.WakeLag)
		total.Timeline.Merge(r.Timeline, 0)
	}
	total.Refreshed = ran.Load() - total.Computed
	return total, ctx.Err()
}
