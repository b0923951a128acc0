package benchmarks

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// BenchmarkOutage kills a redis-server under load (16 goroutines on 8
// keys, a call every millisecond each), keeps it down for two seconds, and
// restarts it; each op is one outage. It reports, for dogpile's Fetch and
// for a plain GET on the same kind of client (the baseline, no breaker),
// with go-redis's default options and with ContextTimeoutEnabled and a
// 200 ms deadline per call:
//
//	fail-ms     the kill to the first call that failed (dogpile: with ErrUnavailable)
//	down-p99-ms p99 of the calls that ended while the server was down, after that first failure
//	recover-ms  the server's restart (answering) to the first call that succeeded;
//	            2000 when none did within the 2 s watched after it
func BenchmarkOutage(b *testing.B) {
	redis.SetLogger(quiet{}) // go-redis logs each failed dial
	for _, cfg := range []struct {
		name     string
		timeouts bool
		deadline time.Duration
	}{{"default", false, 10 * time.Second}, {"short-deadlines", true, 200 * time.Millisecond}} {
		for _, lib := range rotated([]string{"dogpile", "go-redis/get"}) {
			b.Run(cfg.name+"/"+lib, func(b *testing.B) {
				var fail, p99, rec []float64
				for range b.N {
					o := oneOutage(b, lib, cfg.timeouts, cfg.deadline)
					fail, p99, rec = append(fail, o.fail), append(p99, o.downP99), append(rec, o.recovered)
				}
				b.ReportMetric(median(fail), "fail-ms")
				b.ReportMetric(median(p99), "down-p99-ms")
				b.ReportMetric(median(rec), "recover-ms")
			})
		}
	}
}

// An outageRun is what one outage's calls saw, in milliseconds.
type outageRun struct{ fail, downP99, recovered float64 }

// A call is one call of the load: when it ended and how long it took, since
// the load began, and whether it failed fast (dogpile) or at all.
type call struct {
	end, took time.Duration
	err       error
}

func oneOutage(b *testing.B, lib string, timeouts bool, deadline time.Duration) outageRun {
	srv := redistest.StartServer(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: timeouts})
	defer rdb.Close()
	get := func(ctx context.Context, key string) error {
		if err := rdb.Get(ctx, key).Err(); !errors.Is(err, redis.Nil) {
			return err
		}
		return nil // a miss is an answer
	}
	failed := func(err error) bool { return err != nil }
	if lib == "dogpile" {
		c := dogpile.New[int](rdb, dogpile.WithPrefix("outage:"))
		defer c.Close()
		get = func(ctx context.Context, key string) error {
			_, err := c.Fetch(ctx, key, time.Minute, func(context.Context) (int, error) { return 1, nil })
			return err
		}
		failed = func(err error) bool { return errors.Is(err, dogpile.ErrUnavailable) }
	}
	start := time.Now()
	stop := make(chan struct{})
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	for i := range 16 {
		key := string(rune('a' + i%8))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				t0 := time.Now()
				err := get(ctx, key)
				cancel()
				mu.Lock()
				calls = append(calls, call{time.Since(start), time.Since(t0), err})
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	killed := time.Since(start)
	srv.Kill()
	time.Sleep(2 * time.Second)
	srv.Restart()
	restarted := time.Since(start)
	time.Sleep(watch)
	close(stop)
	wg.Wait()
	return summarize(calls, killed, restarted, failed)
}

func summarize(calls []call, killed, restarted time.Duration, failed func(error) bool) outageRun {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	first, recovered := time.Duration(-1), time.Duration(-1)
	var down []float64
	for _, c := range calls {
		switch {
		case c.end > killed && first < 0 && failed(c.err):
			first = c.end - killed
		case c.end > restarted && recovered < 0 && c.err == nil:
			recovered = c.end - restarted
		}
		if first >= 0 && c.end-c.took > killed+first && c.end < restarted {
			down = append(down, ms(c.took))
		}
	}
	if recovered < 0 {
		recovered = watch
	}
	o := outageRun{fail: ms(first), recovered: ms(recovered)}
	if len(down) > 0 {
		slices.Sort(down)
		o.downP99 = down[len(down)*99/100]
	}
	return o
}

// watch is how long the load goes on after the restart.
const watch = 2 * time.Second

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
