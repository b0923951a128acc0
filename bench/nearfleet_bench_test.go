package benchmarks

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// BenchmarkNearFleet: what a fleet of near tiers costs the Redis that
// tracks them. P near-tier Caches (in this process, each with a client and
// a tracking session of its own, as P processes would have) hold 10 keys
// each of their own and read them every 10 ms; one op is a Set of a key
// nobody reads, by a writer of its own, and every 100th op also a Set of a
// key one of them holds. Reported: Redis CPU per op (beats and
// invalidations included), invalidation keys delivered per op (summed over
// the P tiers), the hit ratio of the P tiers' reads, and Redis's CPU in a
// second without writes (the tiers' reads and beats). Tracking is in its
// default mode: Redis reports a write to the processes that read the key.
// (Broadcast mode, BCAST PREFIX, reported every write under the prefix to
// every process; it was measured against this mode, then removed: see
// HISTORY.md, "Near tiers across a fleet".)
func BenchmarkNearFleet(b *testing.B) {
	for _, p := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("default-P%d", p), func(b *testing.B) { nearFleet(b, p) })
	}
}

func nearFleet(b *testing.B, p int) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	w := dogpile.New[item](redis.NewClient(&redis.Options{Addr: srv.Addr()}), dogpile.WithPrefix("fleet:"))
	tiers := make([]*dogpile.Cache[item], p)
	for i := range tiers {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		b.Cleanup(func() { _ = rdb.Close() })
		tiers[i] = dogpile.New[item](rdb, dogpile.WithNearCache(100), dogpile.WithPrefix("fleet:"))
		b.Cleanup(func() { _ = tiers[i].Close() })
		for k := range 10 {
			if err := w.Set(ctx, heldKey(i, k), item{ID: int64(k)}, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	}
	var reads, hits atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range tiers {
		wg.Go(func() { holdKeys(c, i, stop, &reads, &hits) })
	}
	defer func() { close(stop); wg.Wait() }()
	awaitHeld(b, tiers)
	idle := serverCPU(b, srv.Addr())
	time.Sleep(time.Second)
	idle = serverCPU(b, srv.Addr()) - idle
	inv0, reads0, hits0 := invalidations(tiers), reads.Load(), hits.Load()
	cpu0 := serverCPU(b, srv.Addr())
	n := 0
	for b.Loop() {
		if err := w.Set(ctx, fmt.Sprintf("nobody:%d", n), item{ID: int64(n)}, time.Hour); err != nil {
			b.Fatal(err)
		}
		if n%100 == 0 {
			if err := w.Set(ctx, heldKey(n/100%p, n/100%10), item{ID: int64(n)}, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		n++
	}
	cpu := serverCPU(b, srv.Addr()) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "redis-cpu-µs/op")
	b.ReportMetric(100*idle.Seconds(), "redis-idle-cpu-%")
	b.ReportMetric(float64(invalidations(tiers)-inv0)/float64(n), "inval/op")
	if r := reads.Load() - reads0; r > 0 {
		b.ReportMetric(float64(hits.Load()-hits0)/float64(r), "hit-ratio")
	}
}

// awaitHeld waits until each tier has served each of its keys from
// memory, as many near hits as it holds keys at least.
func awaitHeld(b *testing.B, tiers []*dogpile.Cache[item]) {
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range tiers {
		for c.Stats().NearHits < 10 {
			if time.Now().After(deadline) {
				b.Fatalf("near tiers not serving their keys after 30 s: %+v", c.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// heldKey is the k-th of the 10 keys tier i holds.
func heldKey(i, k int) string { return fmt.Sprintf("held:%d:%d", i, k) }

// holdKeys reads tier i's keys through c every 10 ms until stop, counting
// the reads and the near hits.
func holdKeys(c *dogpile.Cache[item], i int, stop chan struct{}, reads, hits *atomic.Int64) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		for k := range 10 {
			before := c.Stats().NearHits
			if _, err := c.Fetch(context.Background(), heldKey(i, k), time.Hour, noCompute); err != nil {
				continue
			}
			reads.Add(1)
			if c.Stats().NearHits > before {
				hits.Add(1)
			}
		}
	}
}

// invalidations sums the invalidations the tiers applied.
func invalidations(tiers []*dogpile.Cache[item]) uint64 {
	var n uint64
	for _, c := range tiers {
		n += c.Stats().NearInvalidations
	}
	return n
}
