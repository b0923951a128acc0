package benchmarks

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// BenchmarkInvalidateTag stores values tagged "hot" (100,000 by default;
// TAG_VALUES overrides) with SetTagged, then times one InvalidateTag of
// "hot", while another connection PINGs the server back to back:
//
//	values          values invalidated
//	ms              the InvalidateTag's wall time
//	redis-cpu-ms    the server's CPU time during it (INFO CPU)
//	ping-max-ms     the longest PING meanwhile (the client's scheduling included)
//	batch-ms        the server's time for one batch of voids (a pipeline Redis
//	                runs back to back): usec_per_call of EVALSHA × the batch size
//	no-ttl-keys     keys of the Cache without a TTL after the fill (must be 0)
func BenchmarkInvalidateTag(b *testing.B) {
	n := envInt("TAG_VALUES", 100_000)
	srv := redistest.StartServer(b)
	for range b.N {
		b.StopTimer()
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
		c := dogpile.New[int](rdb, dogpile.WithPrefix(fmt.Sprint("tags", time.Now().UnixNano(), ":")))
		fillTagged(b, c, n, func(int) []string { return []string{"hot"} })
		noTTL := keysWithoutTTL(b, rdb)
		stop, pingMax := pingLoop(srv.Addr())
		rdb.ConfigResetStat(context.Background())
		cpu0 := serverCPU(b, srv.Addr())
		b.StartTimer()
		t0 := time.Now()
		if err := c.InvalidateTag(context.Background(), "hot"); err != nil {
			b.Fatal(err)
		}
		took := time.Since(t0)
		b.StopTimer()
		cpu := serverCPU(b, srv.Addr()) - cpu0
		stop()
		b.ReportMetric(float64(n), "values")
		b.ReportMetric(float64(took)/float64(time.Millisecond), "ms")
		b.ReportMetric(float64(cpu)/float64(time.Millisecond), "redis-cpu-ms")
		b.ReportMetric(float64(pingMax())/float64(time.Millisecond), "ping-max-ms")
		b.ReportMetric(float64(noTTL), "no-ttl-keys")
		b.ReportMetric(evalshaMicros(b, rdb)*256/1000, "batch-ms")
		rdb.FlushAll(context.Background())
		rdb.Close()
		b.StartTimer()
	}
}

// BenchmarkTagFill stores a million values over 10,000 tags (TAG_VALUES and
// TAGS override) with SetTagged, 64 at a time, and reports the keys left
// without a TTL (tag bookkeeping must expire with the values) and the
// server's memory per value.
func BenchmarkTagFill(b *testing.B) {
	n, tags := envInt("TAG_VALUES", 1_000_000), envInt("TAGS", 10_000)
	srv := redistest.StartServer(b)
	for range b.N {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
		c := dogpile.New[int](rdb, dogpile.WithPrefix("fill:"))
		mem0 := usedMemory(b, rdb)
		t0 := time.Now()
		fillTagged(b, c, n, func(i int) []string { return []string{"t" + strconv.Itoa(i%tags)} })
		b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "values/s")
		b.ReportMetric(float64(usedMemory(b, rdb)-mem0)/float64(n), "bytes/value")
		b.ReportMetric(float64(keysWithoutTTL(b, rdb)), "no-ttl-keys")
		rdb.FlushAll(context.Background())
		rdb.Close()
	}
}

// fillTagged stores n values with SetTagged, tagged as tagsOf says, from
// 64 goroutines.
func fillTagged(b *testing.B, c *dogpile.Cache[int], n int, tagsOf func(i int) []string) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := c.SetTagged(context.Background(), strconv.Itoa(i), i, time.Hour, tagsOf(i)...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

// keysWithoutTTL counts the server's keys without a TTL.
func keysWithoutTTL(b *testing.B, rdb *redis.Client) int {
	ctx := context.Background()
	n := 0
	iter := rdb.Scan(ctx, 0, "*", 10_000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 10_000 {
			n += noTTL(b, rdb, keys)
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	return n + noTTL(b, rdb, keys)
}

func noTTL(b *testing.B, rdb *redis.Client, keys []string) int {
	ctx := context.Background()
	cmds := make([]*redis.DurationCmd, len(keys))
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.PTTL(ctx, k)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, cmd := range cmds {
		if d, err := cmd.Result(); err == nil && d == -1 {
			n++
		}
	}
	return n
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// pingLoop PINGs addr back to back on a connection of its own until stop,
// and then reports the longest PING.
func pingLoop(addr string) (stop func(), longest func() time.Duration) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	done := make(chan struct{})
	var worst atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			t0 := time.Now()
			rdb.Ping(context.Background())
			if d := int64(time.Since(t0)); d > worst.Load() {
				worst.Store(d)
			}
		}
	})
	return func() { close(done); wg.Wait(); rdb.Close() }, func() time.Duration { return time.Duration(worst.Load()) }
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// doc is a JSON-like value of about 64 KiB: repetitive, as real documents
// are.
type doc struct {
	ID    int
	Items []docItem
}

type docItem struct {
	Name, Description string
	Price             int
	Tags              []string
}

func bigDoc() doc {
	d := doc{ID: 42}
	for i := range 400 {
		d.Items = append(d.Items, docItem{
			Name:        fmt.Sprint("item-", i),
			Description: "a fine thing with a long description that repeats itself, as descriptions do",
			Price:       i * 100,
			Tags:        []string{"new", "sale", fmt.Sprint("aisle-", i%12)},
		})
	}
	return d
}

// BenchmarkCompressedHit: a 64 KiB JSON-like document, cached by dogpile
// with WithCompression(1024) (S2), by dogpile without compression, and by
// go-redis/cache (S2 above 64 bytes, its default); 16 goroutines read it.
// It reports the bytes stored in Redis and the hits per second.
func BenchmarkCompressedHit(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	libs := []struct {
		name string
		get  func(rdb *redis.Client) (key string, hit func() error)
	}{
		{"dogpile+s2", func(rdb *redis.Client) (string, func() error) { return dogpileDoc(rdb, dogpile.WithCompression(1024)) }},
		{"dogpile", func(rdb *redis.Client) (string, func() error) { return dogpileDoc(rdb) }},
		{"go-redis/cache", func(rdb *redis.Client) (string, func() error) {
			c := cache.New(&cache.Options{Redis: rdb})
			if err := c.Set(&cache.Item{Ctx: ctx, Key: "grc:doc", Value: bigDoc(), TTL: time.Hour}); err != nil {
				b.Fatal(err)
			}
			return "grc:doc", func() error { var d doc; return c.Get(ctx, "grc:doc", &d) }
		}},
	}
	for _, lib := range rotated(libs) {
		b.Run(lib.name, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
			defer rdb.Close()
			key, hit := lib.get(rdb)
			stored, err := rdb.StrLen(ctx, key).Result()
			if err != nil {
				b.Fatal(err)
			}
			var cmds traffic
			timedLoad(b, srv.Addr(), &cmds, 16, "ops/s", func(int) func() bool {
				return func() bool {
					if err := hit(); err != nil {
						b.Error(err)
						return false
					}
					return true
				}
			})
			b.ReportMetric(float64(stored), "stored-bytes")
		})
	}
}

func dogpileDoc(rdb *redis.Client, opts ...dogpile.Option) (string, func() error) {
	c := dogpile.New[doc](rdb, append(opts, dogpile.WithPrefix(fmt.Sprint("doc", len(opts), ":")))...)
	if err := c.Set(context.Background(), "doc", bigDoc(), time.Hour); err != nil {
		panic(err)
	}
	fetch := func() error {
		_, err := c.Fetch(context.Background(), "doc", time.Hour, func(context.Context) (doc, error) { return doc{}, fmt.Errorf("miss") })
		return err
	}
	return fmt.Sprint("doc", len(opts), ":{doc}"), fetch
}

// evalshaMicros is the server's mean time per EVALSHA since the last
// CONFIG RESETSTAT.
func evalshaMicros(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
		}
	}
	return 0
}
