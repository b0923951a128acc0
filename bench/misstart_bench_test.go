package benchmarks

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dtm-labs/rockscache"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// missStartLibs are the libraries of BenchmarkMissToCompute: those of the
// cache benchmarks, dogpile with WithStale (its first look is always a
// GET), on a context with a deadline, and Refresh, and rockscache.
func missStartLibs() []cacheLib {
	var libs []cacheLib
	for _, l := range cacheLibs {
		if !l.hitOnly {
			libs = append(libs, l)
		}
	}
	return rotated(append(libs,
		cacheLib{
			name: "dogpile+stale",
			how:  "dogpile.New with WithStale(5s): the first look is always a GET (its hits need the expiry)",
			newFetcher: func(rdb *redis.Client) fetcher {
				c := dogpile.New[item](rdb, dogpile.WithStale(rollingStale))
				return fetchWith(c)
			},
		},
		cacheLib{
			// A request handler's call: its context can end, so the miss,
			// after its first look, runs in a goroutine of its own (see
			// dogpile's startFlight).
			name: "dogpile+deadline",
			how:  "dogpile.New defaults, each Fetch on a context with a 10 s deadline, as a request handler's: the miss, after its first look, runs in a goroutine of its own",
			newFetcher: func(rdb *redis.Client) fetcher {
				c := dogpile.New[item](rdb)
				return func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error) {
					ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					return c.Fetch(ctx, key, cacheTTL, compute)
				}
			},
		},
		cacheLib{
			// Not a Fetch: what a miss would cost if Fetch skipped its GET
			// on a key it knows to be missing (Refresh sends the lock
			// script at once).
			name: "dogpile.Refresh",
			how:  "dogpile.New defaults, Refresh instead of Fetch: the lock script is the first command, no GET before it",
			newFetcher: func(rdb *redis.Client) fetcher {
				c := dogpile.New[item](rdb)
				return func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error) {
					return c.Refresh(ctx, key, cacheTTL, compute)
				}
			},
		},
		cacheLib{
			name:       "dtm-labs/rockscache",
			how:        "v0.1.1 Fetch2, default options but RandomExpireAdjustment 0: one EVAL (GET-or-lock) before compute",
			newFetcher: rocksItem,
		}))
}

func rocksItem(rdb *redis.Client) fetcher { return rocksFetch[item](rdb, cacheTTL) }

// rocksFetch is rockscache v0.1.1's Fetch2 for values of type T, msgpack
// encoded like the others, with ttl as the caller's TTL: rockscache stores
// expire - Delay - a random adjustment in whole seconds, so the adjustment
// is off and Delay is added back (else a 1 s TTL caches nothing).
func rocksFetch[T any](rdb *redis.Client, ttl time.Duration) func(ctx context.Context, key string, compute func(context.Context) (T, error)) (T, error) {
	opts := rockscache.NewDefaultOptions()
	opts.RandomExpireAdjustment = 0
	rc := rockscache.NewClient(rdb, opts)
	return func(ctx context.Context, key string, compute func(context.Context) (T, error)) (T, error) {
		var v T
		s, err := rc.Fetch2(ctx, key, ttl+opts.Delay, func() (string, error) {
			v, err := compute(ctx)
			if err != nil {
				return "", err
			}
			b, err := msgpack.Marshal(&v)
			return string(b), err
		})
		if err != nil {
			return v, err
		}
		return v, msgpack.Unmarshal([]byte(s), &v)
	}
}

// BenchmarkMissToCompute measures the winner's time from calling Fetch on a
// cold key (nobody else asks for it) to its compute starting: what a miss
// costs before the backend is even asked. One goroutine, one process; each
// op is a fresh key. It reports the median and p90 over ops, the median of
// a PING timed just before each op (the loopback round trip of the same
// moment), the median in round trips ("rtts"), and the commands sent before
// compute started.
//
//   - warm: one cache for all ops (scripts already loaded by the first op).
//     Its first looks all miss, so dogpile's looks with the lock script
//     after the warm-up's first few ops (see looks in core.go).
//   - new-cache: a new cache per op on the same warm client, so the first
//     script call of each op is the cache's first, and dogpile's first
//     look is a GET, as in a process whose looks mostly hit.
func BenchmarkMissToCompute(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range missStartLibs() {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	for _, fresh := range []bool{false, true} {
		name := "warm"
		if fresh {
			name = "new-cache"
		}
		b.Run(name, func(b *testing.B) {
			for _, lib := range missStartLibs() {
				b.Run(lib.name, func(b *testing.B) { runMissToCompute(b, srv.Addr(), lib, fresh) })
			}
		})
	}
}

func runMissToCompute(b *testing.B, addr string, lib cacheLib, fresh bool) {
	ctx := context.Background()
	var cmds traffic
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	countCommands(rdb, &cmds)
	f := lib.newFetcher(rdb)
	prefix := fmt.Sprintf("misstart:%s:%d:", lib.name, time.Now().UnixNano())
	var toCompute, pings []time.Duration
	var before int64
	op := func(i int, measured bool) {
		if fresh {
			f = lib.newFetcher(rdb)
		}
		key := fmt.Sprint(prefix, i)
		p0 := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		ping := time.Since(p0)
		c0 := cmds.cmds.Load()
		var started time.Duration
		var sent int64
		t0 := time.Now()
		_, err := f(ctx, key, func(context.Context) (item, error) {
			started, sent = time.Since(t0), cmds.cmds.Load()-c0
			return newItem(key), nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if measured {
			toCompute, pings, before = append(toCompute, started), append(pings, ping), before+sent
		}
	}
	for i := range 20 { // connections, scripts, the first op's allocations
		op(-1-i, false)
	}
	b.ResetTimer()
	for i := range b.N {
		op(i, true)
	}
	b.StopTimer()
	slices.Sort(toCompute)
	slices.Sort(pings)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(percentile(toCompute, 0.50)), "to-compute-p50-µs")
	b.ReportMetric(us(percentile(toCompute, 0.90)), "to-compute-p90-µs")
	b.ReportMetric(us(percentile(pings, 0.50)), "ping-p50-µs")
	b.ReportMetric(float64(percentile(toCompute, 0.50))/float64(percentile(pings, 0.50)), "rtts")
	b.ReportMetric(float64(before)/float64(b.N), "cmds-before-compute")
}
