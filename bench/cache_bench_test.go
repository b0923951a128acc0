package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// item is the cached value of every cache benchmark: a small record, about
// 150 bytes of msgpack, typical of a row or an API response.
type item struct {
	ID      int64    `msgpack:"id"`
	Name    string   `msgpack:"name"`
	Price   float64  `msgpack:"price"`
	Tags    []string `msgpack:"tags"`
	Payload []byte   `msgpack:"payload"`
}

func newItem(key string) item {
	return item{
		ID:      int64(len(key)),
		Name:    "item " + key,
		Price:   4.8,
		Tags:    []string{"pils", "lager", "bottle"},
		Payload: make([]byte, 64),
	}
}

// cacheTTL is the value TTL of every cache benchmark: long enough that no
// value expires during a run.
const cacheTTL = time.Hour

// A fetcher is one process's read-through cache: it returns the value under
// key, calling compute on a miss.
type fetcher func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error)

// A cacheLib adapts one read-through approach to fetcher.
type cacheLib struct {
	name string
	how  string
	// newFetcher returns the fetcher of one process using rdb. Goroutines
	// of the process share it, as they would share a cache in a service.
	newFetcher func(rdb *redis.Client) fetcher
	// hitOnly marks a baseline that cannot compute: the hit benchmarks
	// measure it, the miss benchmarks skip it.
	hitOnly bool
}

// fetchWith is the fetcher of a dogpile Cache: Fetch with cacheTTL.
func fetchWith(c *dogpile.Cache[item]) fetcher {
	return func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error) {
		return c.Fetch(ctx, key, cacheTTL, compute)
	}
}

// cacheLibs is every approach compared.
var cacheLibs = []cacheLib{
	{
		name: "dogpile",
		how:  "dogpile.New defaults: msgpack codec in its envelope, in-process flights, a leased compute lock per key and push wake-ups across processes",
		newFetcher: func(rdb *redis.Client) fetcher {
			c := dogpile.New[item](rdb)
			return fetchWith(c)
		},
	},
	{
		name: "go-redis/cache",
		how:  "cache.Once (in-process singleflight, no cross-process lock), no local cache, default msgpack+s2 codec",
		newFetcher: func(rdb *redis.Client) fetcher {
			c := cache.New(&cache.Options{Redis: rdb})
			return func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error) {
				var v item
				err := c.Once(&cache.Item{
					Ctx: ctx, Key: key, Value: &v, TTL: cacheTTL,
					Do: func(it *cache.Item) (any, error) { return compute(it.Context()) },
				})
				return v, err
			}
		},
	},
	{
		name: "naive-cache-aside",
		how:  "GET; on a miss compute and SET PX; msgpack",
		newFetcher: func(rdb *redis.Client) fetcher {
			return func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error) {
				if v, ok, err := getItem(ctx, rdb, key); ok || err != nil {
					return v, err
				}
				v, err := compute(ctx)
				if err != nil {
					return v, err
				}
				return v, setItem(ctx, rdb, key, v)
			}
		},
	},
	{
		name: "setnx-poll-100ms",
		how:  "GET; on a miss SET lock NX PX 10s: the winner computes, SETs and DELs the lock; the others sleep 100ms and GET again",
		newFetcher: func(rdb *redis.Client) fetcher {
			return func(ctx context.Context, key string, compute func(context.Context) (item, error)) (item, error) {
				for {
					if v, ok, err := getItem(ctx, rdb, key); ok || err != nil {
						return v, err
					}
					won, err := rdb.SetNX(ctx, key+":lock", "1", 10*time.Second).Result()
					if err != nil {
						return item{}, err
					}
					if won {
						v, err := compute(ctx)
						if err == nil {
							err = setItem(ctx, rdb, key, v)
						}
						rdb.Del(ctx, key+":lock")
						return v, err
					}
					select {
					case <-ctx.Done():
						return item{}, ctx.Err()
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		},
	},
	{
		name:    "go-redis/get+msgpack",
		how:     "the floor of a hit: one GET and a msgpack decode, no miss handling",
		hitOnly: true,
		newFetcher: func(rdb *redis.Client) fetcher {
			return func(ctx context.Context, key string, _ func(context.Context) (item, error)) (item, error) {
				v, ok, err := getItem(ctx, rdb, key)
				if err == nil && !ok {
					err = fmt.Errorf("get+msgpack: %q not cached", key)
				}
				return v, err
			}
		},
	},
}

// getItem GETs and decodes key, reporting whether it was there.
func getItem(ctx context.Context, rdb *redis.Client, key string) (item, bool, error) {
	var v item
	b, err := rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	return v, true, msgpack.Unmarshal(b, &v)
}

// setItem encodes v and SETs it under key with cacheTTL.
func setItem(ctx context.Context, rdb *redis.Client, key string, v item) error {
	b, err := msgpack.Marshal(&v)
	if err != nil {
		return err
	}
	return rdb.Set(ctx, key, b, cacheTTL).Err()
}

// missLibs returns the libraries that handle misses, rotated.
func missLibs() []cacheLib {
	var libs []cacheLib
	for _, l := range cacheLibs {
		if !l.hitOnly {
			libs = append(libs, l)
		}
	}
	return rotated(libs)
}

// stampedeProbes are dogpile set up two other ways, run by
// BenchmarkStampede beside the peers to tell where its lag goes: with a
// prefix per process each process computes for itself, as go-redis/cache
// does, so its waiters wake on their own process's compute and nothing
// crosses processes; after 16 misses of throwaway keys (the most its
// score counts; 9 move it) a Cache's first looks are the lock script, one
// round trip to the compute as go-redis/cache's GET is, where a Cache
// whose looks mostly hit sends a GET, then the script.
var stampedeProbes = []cacheLib{
	{
		name: "dogpile-own-process",
		how:  "probe: dogpile with a prefix per process, so each process computes its own (the fleet-wide lock is not shared)",
		newFetcher: func(rdb *redis.Client) fetcher {
			c := dogpile.New[item](rdb, dogpile.WithPrefix(fmt.Sprintf("own%d:", os.Getpid())))
			return fetchWith(c)
		},
	},
	{
		name: "dogpile-script-look",
		how:  "probe: dogpile after 16 misses of throwaway keys, so its first looks are the lock script",
		newFetcher: func(rdb *redis.Client) fetcher {
			c := dogpile.New[item](rdb)
			for i := range 16 {
				k := fmt.Sprintf("warm:%d:%d:%d", os.Getpid(), time.Now().UnixNano(), i)
				if _, err := c.Fetch(context.Background(), k, time.Second, func(context.Context) (item, error) { return item{}, nil }); err != nil {
					panic(err)
				}
			}
			return fetchWith(c)
		},
	},
}

// BenchmarkFetchHit measures the hit path: every key is cached before the
// timer starts, and 16 goroutines fetch random keys. The baseline
// "go-redis/get+msgpack" is what any Redis cache must at least do (one GET,
// one decode); dogpile's ops/s ratio to it is its hit-path efficiency.
//
//   - keys=1000-G16: 16 goroutines over 1000 keys.
//   - hot-key-G16: 16 goroutines on one key; go-redis/cache coalesces
//     concurrent hits of one key in its singleflight.
func BenchmarkFetchHit(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range cacheLibs {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	for _, sc := range []struct {
		name string
		keys int
	}{
		{"keys=1000-G16", 1000},
		{"hot-key-G16", 1},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for _, lib := range rotated(cacheLibs) {
				b.Run(lib.name, func(b *testing.B) {
					runHit(b, srv.Addr(), lib, sc.keys, 16)
				})
			}
		})
	}
}

func runHit(b *testing.B, addr string, lib cacheLib, nkeys, g int) {
	ctx := context.Background()
	var cmds traffic
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * g})
	defer rdb.Close()
	countCommands(rdb, &cmds)
	f := lib.newFetcher(rdb)
	prefix := fmt.Sprintf("hit:%s:%d:", lib.name, time.Now().UnixNano())
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		v := newItem(keys[i])
		if lib.hitOnly {
			if err := setItem(ctx, rdb, keys[i], v); err != nil {
				b.Fatal(err)
			}
			continue
		}
		if _, err := f(ctx, keys[i], func(context.Context) (item, error) { return v, nil }); err != nil {
			b.Fatal(err)
		}
	}
	miss := func(context.Context) (item, error) { return item{}, errors.New("hit benchmark: unexpected miss") }
	// Warm up every goroutine's connection.
	var warm sync.WaitGroup
	for i := range g {
		warm.Go(func() {
			if _, err := f(ctx, keys[i%nkeys], miss); err != nil {
				b.Error(err)
			}
		})
	}
	warm.Wait()
	if b.Failed() {
		b.FailNow()
	}
	// Read every key once more, so that a library that keeps what it read
	// in process memory (a near tier, client-side caching) has it all.
	for _, k := range keys {
		if _, err := f(ctx, k, miss); err != nil {
			b.Fatal(err)
		}
	}

	timedLoad(b, addr, &cmds, g, "ops/s", func(i int) func() bool {
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		return func() bool {
			if _, err := f(ctx, keys[rng.IntN(nkeys)], miss); err != nil {
				b.Error(err)
				return false
			}
			return true
		}
	})
}

// timedLoad runs g goroutines that together make b.N calls of the op
// newOp(i) makes for goroutine i (a goroutine stops at its op's first
// false), all released at once, and reports the calls per second as unit
// and, per call, the commands counted on t and the CPU time of this
// process and of the server at addr.
func timedLoad(b *testing.B, addr string, t *traffic, g int, unit string, newOp func(i int) func() bool) {
	var tickets atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range g {
		op := newOp(i)
		wg.Go(func() {
			<-start
			for tickets.Add(1) <= int64(b.N) {
				if !op() {
					return
				}
			}
		})
	}
	cmds0, cpu0, cli0 := t.cmds.Load(), serverCPU(b, addr), processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
	b.ReportMetric(float64(t.cmds.Load()-cmds0)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(processCPU()-cli0)/float64(time.Microsecond)/float64(b.N), "cli-µs/op")
	b.ReportMetric(float64(serverCPU(b, addr)-cpu0)/float64(time.Microsecond)/float64(b.N), "srv-µs/op")
}

// stampede sizes, from issue 3: 4 processes × 50 goroutines on one absent
// key, compute takes 100 ms.
const (
	stampedeProcs   = 4
	stampedeG       = 50
	stampedeCompute = 100 * time.Millisecond
)

// BenchmarkStampede sends 4 processes × 50 goroutines at one absent key at
// the same instant; compute sleeps 100 ms and counts itself with INCR. The
// processes are this test binary re-executed (TestStampedeChild), each with
// its own client and cache, started once per sub-benchmark and driven over
// stdin/stdout. One op is one stampede on a fresh key. It reports computes
// per stampede and the wake lag of the callers that did not compute: their
// latency from the common start minus the 100 ms compute ("lag"). To tell
// the library's part from the machine's, it also reports how late the
// goroutines actually started ("skew", scheduling noise included in every
// lag), when the first compute began (median over ops, "compute-start":
// the library's work before compute), and the non-computing callers'
// latency after the first compute in any process returned ("after-compute":
// store, wake-up, re-read, decode).
func BenchmarkStampede(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range missLibs() {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	b.Run(fmt.Sprintf("P%d-G%d-compute100ms", stampedeProcs, stampedeG), func(b *testing.B) {
		for _, lib := range rotated(append(missLibs(), stampedeProbes...)) {
			b.Run(lib.name, func(b *testing.B) { runStampede(b, srv.Addr(), lib) })
		}
	})
}

// A stampedeRound is what the parent sends a child: fetch Key with G
// goroutines, all starting at Start (unix ns).
type stampedeRound struct {
	Key   string
	G     int
	Start int64
}

// A stampedeResult is a child's answer: per goroutine, the latency from
// Start to Fetch's return, and whether it ran compute itself.
type stampedeResult struct {
	Latency  []time.Duration
	Computed []bool
	// Skew is how late each goroutine actually called Fetch after Start:
	// the scheduling noise that every library's lag includes.
	Skew []time.Duration
	// ComputeStart and ComputeEnd are when the first compute in this
	// process began and returned, relative to Start; 0 if none ran here.
	ComputeStart, ComputeEnd time.Duration
	Err                      string
}

func runStampede(b *testing.B, addr string, lib cacheLib) {
	children := startChildren(b, stampedeProcs, "stampede", procSpec{Addr: addr, Lib: lib.name})
	// A warm-up round on a throwaway key: connections, scripts, and the
	// children's readiness.
	rounds := []string{"warm"}
	for range b.N {
		rounds = append(rounds, "")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var lags, wakes, skews, starts []time.Duration
	var computes int64
	b.ResetTimer()
	for r, tag := range rounds {
		key := fmt.Sprintf("stampede:%s:%d:%d", lib.name, time.Now().UnixNano(), r)
		round := stampedeRound{Key: key, G: stampedeG, Start: time.Now().Add(50 * time.Millisecond).UnixNano()}
		results := exchange[stampedeResult](b, children, round)
		var firstStart, firstEnd time.Duration // of any compute, relative to Start
		for i := range results {
			res := &results[i]
			if res.Err != "" {
				b.Fatalf("child: %s", res.Err)
			}
			if res.ComputeEnd > 0 && (firstEnd == 0 || res.ComputeEnd < firstEnd) {
				firstEnd = res.ComputeEnd
			}
			if res.ComputeStart > 0 && (firstStart == 0 || res.ComputeStart < firstStart) {
				firstStart = res.ComputeStart
			}
		}
		if tag == "" {
			starts = append(starts, firstStart)
		}
		for _, res := range results {
			if tag != "" {
				break
			}
			skews = append(skews, res.Skew...)
			for i, d := range res.Latency {
				if !res.Computed[i] {
					lags = append(lags, d-stampedeCompute)
					wakes = append(wakes, d-firstEnd)
				}
			}
		}
		n, err := rdb.Get(context.Background(), key+":computes").Int64()
		if err != nil {
			b.Fatal(err)
		}
		if tag == "" {
			computes += n
		}
	}
	b.StopTimer()
	slices.Sort(lags)
	slices.Sort(wakes)
	slices.Sort(skews)
	slices.Sort(starts)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(computes)/float64(b.N), "computes/op")
	b.ReportMetric(float64(len(lags))/float64(b.N), "waiters/op")
	b.ReportMetric(ms(percentile(skews, 0.99)), "skew-p99-ms")
	b.ReportMetric(ms(percentile(starts, 0.50)), "compute-start-ms")
	if len(lags) > 0 { // everyone computed: no wake-up to measure
		b.ReportMetric(ms(percentile(lags, 0.50)), "lag-p50-ms")
		b.ReportMetric(ms(percentile(lags, 0.99)), "lag-p99-ms")
		b.ReportMetric(ms(percentile(lags, 1)), "lag-max-ms")
		b.ReportMetric(ms(percentile(wakes, 0.50)), "after-compute-p50-ms")
		b.ReportMetric(ms(percentile(wakes, 0.99)), "after-compute-p99-ms")
	}
}

// BenchmarkFetchCommands counts the Redis commands of one Fetch in each
// role, with a client hook per process. One op: process A fetches an absent
// key (the winner; compute takes 100 ms), process B fetches it 20 ms later
// (a waiter, or a second computer where the library has no cross-process
// lock), then A fetches it again (a hit). Pub/sub commands (dogpile's
// SUBSCRIBE on its shared connection) do not pass through hooks and are not
// counted; connection handshakes are not counted as commands, but the
// connections both processes dial during an op are ("dials/op").
func BenchmarkFetchCommands(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range missLibs() {
		b.Run(lib.name, func(b *testing.B) {
			var ta, tb traffic
			ra := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer ra.Close()
			rb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rb.Close()
			countCommands(ra, &ta)
			countCommands(rb, &tb)
			fa, fb := lib.newFetcher(ra), lib.newFetcher(rb)
			ctx := context.Background()
			var hit, winner, waiter, dials int64
			compute := func(ctx context.Context) (item, error) {
				time.Sleep(stampedeCompute)
				return newItem("k"), nil
			}
			for i := range b.N + 1 { // round 0 warms up
				key := fmt.Sprintf("cmds:%s:%d:%d", lib.name, time.Now().UnixNano(), i)
				a0, b0 := ta.cmds.Load(), tb.cmds.Load()
				d0 := ta.dials.Load() + tb.dials.Load()
				var wg sync.WaitGroup
				wg.Go(func() {
					if _, err := fa(ctx, key, compute); err != nil {
						b.Error(err)
					}
				})
				time.Sleep(20 * time.Millisecond)
				if _, err := fb(ctx, key, compute); err != nil {
					b.Fatal(err)
				}
				wg.Wait()
				a1, b1 := ta.cmds.Load(), tb.cmds.Load()
				if _, err := fa(ctx, key, compute); err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					winner += a1 - a0
					waiter += b1 - b0
					hit += ta.cmds.Load() - a1
					dials += ta.dials.Load() + tb.dials.Load() - d0
				}
			}
			b.ReportMetric(float64(dials)/float64(b.N), "dials/op")
			b.ReportMetric(float64(hit)/float64(b.N), "hit-cmds")
			b.ReportMetric(float64(winner)/float64(b.N), "winner-cmds")
			b.ReportMetric(float64(waiter)/float64(b.N), "waiter-cmds")
		})
	}
}

// stampedeChild is one process of BenchmarkStampede.
func stampedeChild(p *redistest.Parent) {
	var spec procSpec
	p.Params(&spec)
	libs := append(slices.Clip(cacheLibs), stampedeProbes...)
	i := slices.IndexFunc(libs, func(l cacheLib) bool { return l.name == spec.Lib })
	if i < 0 {
		p.Fatalf("unknown library %q", spec.Lib)
	}
	rdb := redis.NewClient(&redis.Options{Addr: spec.Addr, PoolSize: 2 * stampedeG})
	defer rdb.Close()
	f := libs[i].newFetcher(rdb)
	serveRounds(p, func(r stampedeRound) stampedeResult {
		res := stampedeResult{
			Latency:  make([]time.Duration, r.G),
			Computed: make([]bool, r.G),
			Skew:     make([]time.Duration, r.G),
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := time.Unix(0, r.Start)
		for g := range r.G {
			wg.Go(func() {
				time.Sleep(time.Until(start))
				res.Skew[g] = time.Since(start)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := f(ctx, r.Key, func(ctx context.Context) (item, error) {
					res.Computed[g] = true
					mu.Lock()
					if res.ComputeStart == 0 {
						res.ComputeStart = time.Since(start)
					}
					mu.Unlock()
					time.Sleep(stampedeCompute)
					if err := rdb.Incr(ctx, r.Key+":computes").Err(); err != nil {
						return item{}, err
					}
					mu.Lock()
					if res.ComputeEnd == 0 {
						res.ComputeEnd = time.Since(start)
					}
					mu.Unlock()
					return newItem(r.Key), nil
				})
				res.Latency[g] = time.Since(start)
				if err != nil {
					mu.Lock()
					res.Err = err.Error()
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return res
	})
}
