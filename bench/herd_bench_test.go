package benchmarks

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// herdG is how many callers one herd sends at one absent key: a stampede's
// callers in one process (see BenchmarkStampede).
const herdG = 50

// BenchmarkHerd measures what a herd of callers costs the process they run
// in: one op is herdG goroutines, each new (as a caller started for its
// request is), asking for one absent key at once; one of them computes
// (1 ms), the others wait for it and each gets its own copy. It reports
// the client's CPU time per caller ("cli-µs/caller": start, join, wait,
// wake-up and decode, the share of the compute and the store included).
// Across a fleet every process's herd wakes at the same moment, when the
// value is stored: on shared cores this is what the last waiter waits
// behind (see BenchmarkStampede).
func BenchmarkHerd(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range missLibs() {
		if lib.name != "dogpile" && lib.name != "go-redis/cache" {
			continue // the others compute once per caller: no herd waits
		}
		b.Run(fmt.Sprintf("G%d/%s", herdG, lib.name), func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			f := lib.newFetcher(rdb)
			prefix := fmt.Sprintf("herd:%s:%d:", lib.name, time.Now().UnixNano())
			compute := func(context.Context) (item, error) {
				time.Sleep(time.Millisecond)
				return newItem("k"), nil
			}
			herd := func(key string) {
				var wg sync.WaitGroup
				for range herdG {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						if _, err := f(ctx, key, compute); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			herd(prefix + "warm") // connections, scripts
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				herd(fmt.Sprint(prefix, i))
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N*herdG), "cli-µs/caller")
		})
	}
}
