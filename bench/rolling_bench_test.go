package benchmarks

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The rolling-expiry scenario (issue 14): 4 processes × 16 goroutines read
// 8 hot keys in a closed loop; every value lives 1 s and costs a 100 ms
// compute. The keys come online one after the other, TTL/8 apart, so that
// some key expires every 125 ms: callers meet an expiry all the time, not
// all at once. What it shows is who waits at each expiry, and how many
// computes each expiry costs the backend.
const (
	rollingProcs   = 4
	rollingG       = 16
	rollingKeys    = 8
	rollingTTL     = time.Second
	rollingCompute = 100 * time.Millisecond
	// oldSlack: an answer is not a hit when its value was computed more
	// than TTL + oldSlack before the call began (the value's TTL starts when
	// it is stored, a round trip after its compute returned). Such answers
	// are stale ones; which answers are stale is counted by the library.
	oldSlack = 10 * time.Millisecond
	// waitFloor: a call that got a value computed while it ran waited for
	// that compute only if it took longer than this. Shorter ones read a
	// value that a background refresh stored while their read was in
	// flight (measured: 1–10 ms on a loaded machine), which is a hit.
	waitFloor = rollingCompute / 5
)

var rollingDuration = flag.Duration("rolling.duration", 10*time.Second, "measured time of each BenchmarkRollingExpiry op")

// BenchmarkRollingExpiry runs the rolling-expiry scenario once per op and
// library, in child processes (TestRollingChild). The first TTL (the keys'
// first fills) is not measured. Per library it reports the callers' latency
// (p50, p99, max), the p99 of the hits alone in the same run and the ratio
// of the two ("p99/hit-p99": 1 means nobody waits more than a hit), computes
// per expiry (an expiry is a burst of computes of one key, starts less than
// TTL/2 apart: more than 1 is a duplicate compute), computes per key per TTL
// period (early refresh refreshes a little more often than the TTL), and
// the share of stale answers (as the library counts them: dogpile's
// Stats.Stale, judged by Redis's clock; the peers never answer with a value
// past its TTL) and of calls that waited for a compute (they ran it,
// or got a value computed while they ran and took longer than waitFloor).
func BenchmarkRollingExpiry(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, lib := range rollingLibs {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	name := fmt.Sprintf("P%d-G%d-K%d-ttl1s-compute100ms", rollingProcs, rollingG, rollingKeys)
	b.Run(name, func(b *testing.B) {
		for _, lib := range rotated(rollingLibs) {
			b.Run(lib.name, func(b *testing.B) { runRolling(b, srv.Addr(), lib) })
		}
	})
}

// A rollingRound is what the parent sends a child: read Prefix's keys from
// Start (unix ns) for TTL + Duration, measuring the calls that begin after
// the first TTL.
type rollingRound struct {
	Prefix   string
	Start    int64
	Duration time.Duration
}

// A rollingResult is what one child saw in the measured window.
type rollingResult struct {
	All, Hit hist
	// Old answers are neither hits nor waited for (see oldSlack); Stale
	// is the library's own count.
	Hits, Old, Stale, Waited, Computed, Errs int64
	// Starts are the unix µs at which computes began, per key, the
	// background refreshes included.
	Starts   [rollingKeys][]int64
	FirstErr string
}

func runRolling(b *testing.B, addr string, lib rollingLib) {
	children := startChildren(b, rollingProcs, "rolling", procSpec{Addr: addr, Lib: lib.name})
	for _, c := range children {
		c.SetTimeout(redistest.ChildTimeout + *rollingDuration) // a round lasts the duration
	}
	var total rollingResult
	var computes, expiries int64
	b.ResetTimer()
	for r := range b.N {
		round := rollingRound{Prefix: fmt.Sprintf("rolling:%s:%d:%d:", lib.name, time.Now().UnixNano(), r),
			Start: time.Now().Add(100 * time.Millisecond).UnixNano(), Duration: *rollingDuration}
		var starts [rollingKeys][]int64
		for _, res := range exchange[rollingResult](b, children, round) {
			total.add(res)
			for k := range starts {
				starts[k] = append(starts[k], res.Starts[k]...)
			}
		}
		from := time.Unix(0, round.Start).Add(rollingTTL)
		c, e := bursts(starts, from.UnixMicro(), from.Add(round.Duration).UnixMicro())
		computes, expiries = computes+c, expiries+e
	}
	b.StopTimer()
	if total.Errs > 0 {
		b.Errorf("%d errors; first: %s", total.Errs, total.FirstErr)
	}
	reportRolling(b, total, computes, expiries)
}

// add sums a child's result into t.
func (t *rollingResult) add(r rollingResult) {
	t.All.merge(r.All)
	t.Hit.merge(r.Hit)
	t.Hits += r.Hits
	t.Old += r.Old
	t.Stale += r.Stale
	t.Waited += r.Waited
	t.Computed += r.Computed
	t.Errs += r.Errs
	if t.FirstErr == "" {
		t.FirstErr = r.FirstErr
	}
}

// bursts counts the computes that began in [from, to) µs, and the expiries
// they served: per key, a compute that begins more than TTL/2 after the
// previous one starts a new burst (a value lives a whole TTL, so two
// computes closer than that are one expiry computed twice).
func bursts(starts [rollingKeys][]int64, from, to int64) (computes, expiries int64) {
	gap := rollingTTL.Microseconds() / 2
	for _, s := range starts {
		slices.Sort(s)
		for i, t := range s {
			if t < from || t >= to {
				continue
			}
			computes++
			if i == 0 || t-s[i-1] > gap {
				expiries++
			}
		}
	}
	return computes, expiries
}

func reportRolling(b *testing.B, t rollingResult, computes, expiries int64) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	calls := float64(t.All.N)
	measured := float64(b.N) * rollingDuration.Seconds()
	b.ReportMetric(calls/measured, "calls/s")
	b.ReportMetric(ms(t.All.quantile(0.50)), "p50-ms")
	b.ReportMetric(ms(t.All.quantile(0.99)), "p99-ms")
	b.ReportMetric(ms(t.All.quantile(1)), "max-ms")
	b.ReportMetric(ms(t.Hit.quantile(0.99)), "hit-p99-ms")
	if hp := t.Hit.quantile(0.99); hp > 0 {
		b.ReportMetric(float64(t.All.quantile(0.99))/float64(hp), "p99/hit-p99")
	}
	if expiries > 0 {
		b.ReportMetric(float64(computes)/float64(expiries), "computes/expiry")
	}
	periods := float64(rollingKeys) * measured / rollingTTL.Seconds()
	b.ReportMetric(float64(computes)/periods, "computes/key-ttl")
	b.ReportMetric(100*float64(t.Stale)/calls, "stale-%")
	b.ReportMetric(100*float64(t.Waited+t.Computed)/calls, "waited-%")
}

// rollingChild is one process of BenchmarkRollingExpiry.
func rollingChild(p *redistest.Parent) {
	var spec procSpec
	p.Params(&spec)
	i := slices.IndexFunc(rollingLibs, func(l rollingLib) bool { return l.name == spec.Lib })
	if i < 0 {
		p.Fatalf("unknown library %q", spec.Lib)
	}
	rdb := redis.NewClient(&redis.Options{Addr: spec.Addr, PoolSize: 2 * rollingG})
	defer rdb.Close()
	f, stale := rollingLibs[i].newFetcher(rdb)
	if stale == nil {
		stale = func() uint64 { return 0 }
	}
	serveRounds(p, func(r rollingRound) rollingResult { return rollingLoad(f, stale, r) })
}

// rollingLoad is one child's part of a round.
func rollingLoad(f stampFetcher, stale func() uint64, r rollingRound) rollingResult {
	start := time.Unix(0, r.Start)
	from, end := start.Add(rollingTTL), start.Add(rollingTTL+r.Duration)
	stale0 := make(chan uint64, 1)
	go func() {
		time.Sleep(time.Until(from))
		stale0 <- stale()
	}()
	var mu sync.Mutex
	var total rollingResult
	record := func(k int, t time.Time) {
		mu.Lock()
		total.Starts[k] = append(total.Starts[k], t.UnixMicro())
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for g := range rollingG {
		wg.Go(func() {
			var res rollingResult
			rng := rand.New(rand.NewPCG(uint64(r.Start), uint64(g)))
			time.Sleep(time.Until(start))
			for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
				// Key k comes online k·TTL/8 after the start.
				online := min(rollingKeys, 1+int(t0.Sub(start)/(rollingTTL/rollingKeys)))
				k := rng.IntN(online)
				res.call(f, r.Prefix, k, t0, !t0.Before(from), record)
			}
			mu.Lock()
			total.add(res)
			mu.Unlock()
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var out rollingResult
	out.add(total)
	out.Stale = int64(stale() - <-stale0)
	for k := range out.Starts {
		out.Starts[k] = slices.Clone(total.Starts[k])
	}
	return out
}

// call makes one Fetch of key k at t0 and, if measured, classifies it.
func (res *rollingResult) call(f stampFetcher, prefix string, k int, t0 time.Time, measured bool, record func(int, time.Time)) {
	key := fmt.Sprint(prefix, k)
	var self bool
	var mu sync.Mutex // a background refresh may run compute after the call returned
	v, err := f(context.Background(), key, func(context.Context) (stamped, error) {
		record(k, time.Now())
		mu.Lock()
		self = true
		mu.Unlock()
		time.Sleep(rollingCompute)
		return stamped{Key: key, ComputedAt: time.Now().UnixMicro(), Payload: make([]byte, 64)}, nil
	})
	d := time.Since(t0)
	if !measured {
		return
	}
	mu.Lock()
	computed := self
	mu.Unlock()
	res.All.record(d)
	age := t0.Sub(time.UnixMicro(v.ComputedAt))
	switch {
	case err != nil:
		res.Errs++
		if res.FirstErr == "" {
			res.FirstErr = err.Error()
		}
	case computed:
		res.Computed++
	case age < 0 && d > waitFloor:
		res.Waited++ // for a compute by someone else
	case age > rollingTTL+oldSlack:
		res.Old++
	default:
		res.Hits++
		res.Hit.record(d)
	}
}
