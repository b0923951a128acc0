package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// nearEntries is the near tier's size in these benchmarks: every key fits.
const nearEntries = 10_000

// noCompute is the compute of reads of keys that are always there.
func noCompute(context.Context) (item, error) {
	return item{}, errors.New("near benchmark: unexpected miss")
}

// newNearCache returns a Cache with a near tier whose tracking is in place.
func newNearCache(tb testing.TB, rdb *redis.Client, opts ...dogpile.Option) *dogpile.Cache[item] {
	opts = append([]dogpile.Option{dogpile.WithNearCache(nearEntries), dogpile.WithPrefix("near:")}, opts...)
	c := dogpile.New[item](rdb, opts...)
	ctx := context.Background()
	if err := c.Set(ctx, "probe", item{}, cacheTTL); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().NearHits == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("near cache: tracking not in place after 10 s: %+v", c.Stats())
		}
		if _, err := c.Fetch(ctx, "probe", cacheTTL, noCompute); err != nil {
			tb.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	return c
}

// newRueidis returns a rueidis client for addr (RESP3, client-side caching
// in its default tracking mode); b.Cleanup closes it.
func newRueidis(tb testing.TB, addr string, onInvalidations func([]rueidis.RedisMessage)) rueidis.Client {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableRetry: true, OnInvalidations: onInvalidations})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// rueidisGet reads key through rueidis's client-side cache and decodes it.
func rueidisGet(ctx context.Context, c rueidis.Client, key string) (item, bool, error) {
	var v item
	r := c.DoCache(ctx, c.B().Get().Key(key).Cache(), cacheTTL)
	b, err := r.AsBytes()
	if err != nil {
		return v, false, err
	}
	return v, r.IsCacheHit(), msgpack.Unmarshal(b, &v)
}

// nearLibs are the libraries of the near-cache benchmarks; tb owns what
// they open.
func nearLibs(tb testing.TB) []cacheLib {
	return []cacheLib{
		{
			name: "dogpile+near",
			how:  "dogpile.New with WithNearCache(10000): decoded values in process memory, invalidated by Redis (CLIENT TRACKING, default mode)",
			newFetcher: func(rdb *redis.Client) fetcher {
				c := newNearCache(tb, rdb)
				return fetchWith(c)
			},
		},
		{
			// A short name: keys embed it, and the value key must stay in
			// dogpile+near's allocation size class for a fair comparison.
			name: "dogpile+near+1%",
			how:  "dogpile+near with WithConsistencySampling(0.01): one near hit in a hundred checked against Redis in the background (at most 200 a second)",
			newFetcher: func(rdb *redis.Client) fetcher {
				return fetchWith(newNearCache(tb, rdb, dogpile.WithConsistencySampling(0.01)))
			},
		},
		cacheLibs[0], // dogpile, no near tier
		{
			name:    "rueidis/DoCache",
			how:     "rueidis DoCache(GET) with a 1 h client-side TTL (RESP3 tracking, default mode) and a msgpack decode",
			hitOnly: true,
			newFetcher: func(rdb *redis.Client) fetcher {
				c := newRueidis(tb, rdb.Options().Addr, nil)
				return func(ctx context.Context, key string, _ func(context.Context) (item, error)) (item, error) {
					v, _, err := rueidisGet(ctx, c, key)
					return v, err
				}
			},
		},
		cacheLibs[len(cacheLibs)-1], // go-redis/get+msgpack
	}
}

// BenchmarkNearHit measures hits with a near tier against the plain hit
// path, rueidis's client-side caching and the floor of a Redis hit (GET and
// a msgpack decode): one goroutine or 16, on one key or 1000.
func BenchmarkNearHit(b *testing.B) {
	srv := redistest.StartServer(b)
	libs := nearLibs(b)
	for _, lib := range libs {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	for _, sc := range []struct {
		name    string
		keys, g int
	}{
		{"hot-key-G1", 1, 1},
		{"hot-key-G16", 1, 16},
		{"keys=1000-G16", 1000, 16},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for _, lib := range rotated(libs) {
				b.Run(lib.name, func(b *testing.B) {
					runHit(b, srv.Addr(), lib, sc.keys, sc.g)
				})
			}
		})
	}
}

// A nearPair is a reader that caches in process memory and a writer on
// another connection (another process), on one key.
type nearPair struct {
	name string
	// write stores an item with id under key.
	write func(ctx context.Context, key string, id int64) error
	// read returns key's item and whether it came from process memory.
	read func(ctx context.Context, key string) (item, bool, error)
	// applied receives the time the reader's library had dropped its copy
	// of a key after Redis's invalidation (its own invalidation callback).
	applied chan time.Time
}

// appliedNow sends the time to ch without blocking (a full channel holds
// times enough: the benchmark drains it before each write).
func appliedNow(ch chan time.Time) {
	select {
	case ch <- time.Now():
	default:
	}
}

func nearPairs(tb testing.TB, addr string) []nearPair {
	newClient := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr})
		tb.Cleanup(func() { _ = c.Close() })
		return c
	}
	dpApplied, rcApplied := make(chan time.Time, 64), make(chan time.Time, 64)
	reader := newNearCache(tb, newClient(), dogpile.WithObserver(func(_ context.Context, e dogpile.Event) context.Context {
		if e.Kind == dogpile.EventInvalidate && e.Key != "" {
			appliedNow(dpApplied)
		}
		return nil
	}))
	writer := dogpile.New[item](newClient(), dogpile.WithPrefix("near:"))
	rc := newRueidis(tb, addr, func(keys []rueidis.RedisMessage) {
		if keys != nil {
			appliedNow(rcApplied)
		}
	})
	raw := newClient()
	return []nearPair{
		{
			name:    "dogpile+near",
			applied: dpApplied,
			write: func(ctx context.Context, key string, id int64) error {
				return writer.Set(ctx, key, item{ID: id}, cacheTTL)
			},
			read: func(ctx context.Context, key string) (item, bool, error) {
				hits := reader.Stats().NearHits
				v, err := reader.Fetch(ctx, key, cacheTTL, noCompute)
				return v, reader.Stats().NearHits > hits, err
			},
		},
		{
			name:    "rueidis/DoCache",
			applied: rcApplied,
			write: func(ctx context.Context, key string, id int64) error {
				return setItem(ctx, raw, key, item{ID: id})
			},
			read: func(ctx context.Context, key string) (item, bool, error) { return rueidisGet(ctx, rc, key) },
		},
	}
}

// BenchmarkNearInvalidation measures how soon after another process's
// write of a key a reader that had the key in process memory stops serving
// the old value. One op is a write, then the wait for its invalidation,
// then reads until the key is served from memory again (not timed); lags
// are measured from the write's return. Two readers:
//
//   - busy-reader reads back to back (yielding between reads), as a busy
//     service would: "inv" is the lag to the start of the first read not
//     served from memory, "new" to the first read that returned the new
//     value (inv plus a round trip). Its spinning keeps a core busy, so on
//     a 2-core machine the invalidation's receiver competes for a core with
//     it and with redis-server.
//   - idle-reader waits for its library's own invalidation callback
//     (dogpile's EventInvalidate, rueidis's OnInvalidations), called once
//     the local copy is dropped: "applied" is the invalidation delay itself.
func BenchmarkNearInvalidation(b *testing.B) {
	srv := redistest.StartServer(b)
	pairs := nearPairs(b, srv.Addr())
	for _, reader := range []struct {
		name string
		wait func(*testing.B, nearPair, string, int64, time.Time, *lags)
	}{
		{"busy-reader", readUntilNew},
		{"idle-reader", awaitApplied},
	} {
		b.Run(reader.name, func(b *testing.B) {
			for _, p := range rotated(pairs) {
				b.Run(p.name, func(b *testing.B) {
					ctx := context.Background()
					key := fmt.Sprintf("inv:%d", time.Now().UnixNano())
					if err := p.write(ctx, key, 0); err != nil {
						b.Fatal(err)
					}
					var l lags
					for i := int64(1); b.Loop(); i++ {
						awaitCached(b, p, key)
						drain(p.applied)
						if err := p.write(ctx, key, i); err != nil {
							b.Fatal(err)
						}
						reader.wait(b, p, key, i, time.Now(), &l)
					}
					l.report(b)
				})
			}
		})
	}
}

// lags are the delays one BenchmarkNearInvalidation run measured.
type lags struct{ inv, seen, applied hist }

func (l *lags) report(b *testing.B) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for _, m := range []struct {
		name string
		h    *hist
	}{{"inv", &l.inv}, {"new", &l.seen}, {"applied", &l.applied}} {
		if m.h.N > 0 {
			b.ReportMetric(us(m.h.quantile(0.5)), m.name+"-p50-µs")
			b.ReportMetric(us(m.h.quantile(0.99)), m.name+"-p99-µs")
		}
	}
}

// readUntilNew reads key back to back until it returns the item with id.
func readUntilNew(b *testing.B, p nearPair, key string, id int64, t0 time.Time, l *lags) {
	invalidated := false
	for {
		tr := time.Now()
		v, cached, err := p.read(context.Background(), key)
		if err != nil {
			b.Fatal(err)
		}
		if !cached && !invalidated {
			invalidated = true
			l.inv.record(tr.Sub(t0)) // applied before this read began
		}
		if v.ID == id {
			l.seen.record(time.Since(t0))
			return
		}
		runtime.Gosched()
	}
}

// awaitApplied waits, without reading, for the reader's invalidation
// callback; one that ran before the write returned counts as 0.
func awaitApplied(b *testing.B, p nearPair, _ string, _ int64, t0 time.Time, l *lags) {
	select {
	case at := <-p.applied:
		l.applied.record(max(at.Sub(t0), 0))
	case <-time.After(10 * time.Second):
		b.Fatalf("%s: no invalidation 10 s after the write", p.name)
	}
}

// drain empties ch.
func drain(ch chan time.Time) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// awaitCached reads key until the answer comes from process memory.
func awaitCached(b *testing.B, p nearPair, key string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, cached, err := p.read(context.Background(), key)
		if err != nil {
			b.Fatal(err)
		}
		if cached {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %q never served from memory", p.name, key)
		}
	}
}
