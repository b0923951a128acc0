package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The store-lag scenario: many keys miss at once in several processes (one
// goroutine per key, every process the same keys). The lag that matters is
// the winner's: from its compute's end to its Fetch returning, i.e. the store
// round trip that wakes every other process. Stores that queue behind lock
// attempts for later keys make every key late.
const (
	storeLagProcs   = 4
	storeLagCompute = 50 * time.Millisecond
)

// A storeLagRound is what the parent sends a child.
type storeLagRound struct {
	Prefix string
	N      int
	Start  int64 // unix ns
}

// A storeLagResult is a child's answer.
type storeLagResult struct {
	StoreLag []time.Duration // per key this process computed: compute end → Fetch returned
	Wall     time.Duration   // Start → the last Fetch returned
	Computes uint64
	Err      string
}

// BenchmarkStoreLag reports the winner's store lag (p50, p99) with N keys in
// flight across 4 processes, and the wall time over one compute.
func BenchmarkStoreLag(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("P%d-N%d-compute50ms", storeLagProcs, n), func(b *testing.B) {
			runStoreLag(b, srv.Addr(), n)
		})
	}
}

func runStoreLag(b *testing.B, addr string, n int) {
	children := startChildren(b, storeLagProcs, "storelag", procSpec{Addr: addr})
	var lags, walls []time.Duration
	var computes uint64
	b.ResetTimer()
	for r := range b.N + 1 { // round 0 warms connections and scripts
		round := storeLagRound{Prefix: fmt.Sprintf("storelag:%d:%d:", time.Now().UnixNano(), r), N: n,
			Start: time.Now().Add(50 * time.Millisecond).UnixNano()}
		var wall time.Duration
		for _, res := range exchange[storeLagResult](b, children, round) {
			if res.Err != "" {
				b.Fatalf("child: %s", res.Err)
			}
			if r > 0 {
				lags = append(lags, res.StoreLag...)
				computes += res.Computes
			}
			wall = max(wall, res.Wall)
		}
		if r > 0 {
			walls = append(walls, wall)
		}
	}
	b.StopTimer()
	slices.Sort(lags)
	slices.Sort(walls)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(computes)/float64(b.N*n), "computes/key")
	b.ReportMetric(ms(percentile(lags, 0.50)), "store-lag-p50-ms")
	b.ReportMetric(ms(percentile(lags, 0.99)), "store-lag-p99-ms")
	b.ReportMetric(float64(percentile(walls, 0.50))/float64(storeLagCompute), "wall/compute")
}

// storeLagChild is one process of BenchmarkStoreLag.
func storeLagChild(p *redistest.Parent) {
	var spec procSpec
	p.Params(&spec)
	rdb := redis.NewClient(&redis.Options{Addr: spec.Addr})
	defer rdb.Close()
	c := dogpile.New[item](rdb, dogpile.WithPrefix("storelag:"))
	serveRounds(p, func(r storeLagRound) storeLagResult {
		before := c.Stats().Computes
		var res storeLagResult
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Unix(0, r.Start)
		for i := range r.N {
			wg.Go(func() {
				time.Sleep(time.Until(start))
				key := fmt.Sprint(r.Prefix, i)
				var end time.Time
				_, err := c.Fetch(context.Background(), key, time.Minute, func(ctx context.Context) (item, error) {
					time.Sleep(storeLagCompute)
					end = time.Now()
					return newItem(key), nil
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					res.Err = err.Error()
				}
				if !end.IsZero() {
					res.StoreLag = append(res.StoreLag, time.Since(end))
				}
				res.Wall = max(res.Wall, time.Since(start))
			})
		}
		wg.Wait()
		res.Computes = c.Stats().Computes - before
		return res
	})
}
