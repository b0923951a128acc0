package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The batch miss scenario: the same 100 absent keys requested at once by 4
// processes (this binary re-executed, TestManyMissChild), each with one
// FetchMany call ("dogpile.FetchMany") or one goroutine per key calling
// Fetch ("dogpile", as in BenchmarkStoreLag). compute sleeps 50 ms per call
// (a batch query costs about what one row does). Reported: keys computed per
// key (the fleet-wide guarantee: 1), compute calls per round, and the wall
// time from the common start to the last caller's return, over the
// compute's own time.
const (
	manyMissProcs   = 4
	manyMissCompute = 50 * time.Millisecond
)

var manyMissLibs = []string{"dogpile.FetchMany", "dogpile"}

// A manyMissRound is what the parent sends a child.
type manyMissRound struct {
	Prefix string
	Lib    string
	Start  int64 // unix ns
}

// A manyMissResult is a child's answer.
type manyMissResult struct {
	Wall  time.Duration // Start → its last call returned
	Keys  int64         // keys its compute calls computed
	Calls int64         // its compute calls
	Err   string
}

func runManyMiss(b *testing.B, addr, lib string) {
	children := startChildren(b, manyMissProcs, "manymiss", procSpec{Addr: addr})
	var walls []time.Duration
	var keys, calls int64
	b.ResetTimer()
	for r := range b.N + 1 { // round 0 warms connections and scripts
		round := manyMissRound{Prefix: fmt.Sprintf("manymiss:%d:%d:", time.Now().UnixNano(), r), Lib: lib,
			Start: time.Now().Add(50 * time.Millisecond).UnixNano()}
		var wall time.Duration
		for _, res := range exchange[manyMissResult](b, children, round) {
			if res.Err != "" {
				b.Fatalf("child: %s", res.Err)
			}
			if r > 0 {
				keys += res.Keys
				calls += res.Calls
			}
			wall = max(wall, res.Wall)
		}
		if r > 0 {
			walls = append(walls, wall)
		}
	}
	b.StopTimer()
	slices.Sort(walls)
	b.ReportMetric(float64(keys)/float64(b.N*manyKeys), "computes/key")
	b.ReportMetric(float64(calls)/float64(b.N), "compute-calls/round")
	b.ReportMetric(float64(percentile(walls, 0.50))/float64(manyMissCompute), "wall/compute")
}

// manyMissChild is one process of the batch miss scenario.
func manyMissChild(p *redistest.Parent) {
	var spec procSpec
	p.Params(&spec)
	rdb := redis.NewClient(&redis.Options{Addr: spec.Addr})
	defer rdb.Close()
	c := dogpile.New[item](rdb, dogpile.WithPrefix("manymiss:"))
	serveRounds(p, func(r manyMissRound) manyMissResult {
		var res manyMissResult
		var nkeys, ncalls atomic.Int64
		compute := func(ctx context.Context, missing []string) (map[string]item, error) {
			ncalls.Add(1)
			nkeys.Add(int64(len(missing)))
			time.Sleep(manyMissCompute)
			m := make(map[string]item, len(missing))
			for _, k := range missing {
				m[k] = newItem(k)
			}
			return m, nil
		}
		keys := make([]string, manyKeys)
		for i := range keys {
			keys[i] = fmt.Sprint(r.Prefix, i)
		}
		start := time.Unix(0, r.Start)
		var mu sync.Mutex
		fail := func(err error) {
			mu.Lock()
			res.Err = err.Error()
			mu.Unlock()
		}
		time.Sleep(time.Until(start))
		if r.Lib == "dogpile.FetchMany" {
			if got, err := c.FetchMany(context.Background(), keys, time.Minute, compute); err != nil || len(got) != len(keys) {
				fail(fmt.Errorf("FetchMany: %d values, %v", len(got), err))
			}
		} else {
			var wg sync.WaitGroup
			for _, k := range keys {
				wg.Go(func() {
					_, err := c.Fetch(context.Background(), k, time.Minute, func(ctx context.Context) (item, error) {
						m, err := compute(ctx, []string{k})
						return m[k], err
					})
					if err != nil {
						fail(err)
					}
				})
			}
			wg.Wait()
		}
		res.Wall = time.Since(start)
		res.Keys, res.Calls = nkeys.Load(), ncalls.Load()
		return res
	})
}
