package dogpile

// Checking sampled hits in the background (WithConsistencySampling,
// WithSourceCheck): which hits are picked, how many checks may begin, and
// the goroutine that runs them. What a check looks at is in
// consistency.go and sourcecheck.go.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/life"
	"github.com/dogpile-go/dogpile/internal/near"
)

// Bounds of the checks, per option and per Cache (documented on the options
// and in docs/design.md, "Measuring consistency").
const (
	checkRate    = 200                   // checks begun per second, at most (see checker.take)
	checkBurst   = 20                    // of which this many may begin at once
	checkQueue   = 64                    // picked hits waiting for the checker's goroutine; one more is dropped
	checkPending = 512                   // checks waiting for their next step; one more is dropped
	checkTick    = 20 * time.Millisecond // while checks wait, the checker wakes this often, and no more
	checkTimeout = time.Second           // bounds a check's read of Redis
	verifyBound  = 5 * time.Second       // bounds a call of WithSourceCheck's verify
)

// A verdict is what a step of a check found.
type verdict int

const (
	checkDrop verdict = iota // no answer (Redis down or failing, verify failed, Close): not counted
	checkOK                  // consistent: counted as sampled
	checkBad                 // inconsistent: counted as sampled and inconsistent, and reported
	checkNext                // not known yet: the next step decides, after its delay
)

// A checker runs the checks of one option on the hits it picks: one or
// two steps each, the first delays[0] after the hit, the second delays[1]
// after the first ended. It runs them on one goroutine of the Cache
// (started by the first picked hit, ended by Close), off every caller's
// path, in rounds: the steps due at one wake-up share it, and the reads
// of Redis they need (reads[i] names the value key step i reads, if any)
// share one round trip (read).
type checker[S any] struct {
	limit  uint64 // see pick
	delays [2]time.Duration
	reads  [2]func(s *S) string
	steps  [2]func(ctx context.Context, s *S, g got) verdict
	read   func(ctx context.Context, vks []string) []got
	bad    func(ctx context.Context, s *S) // reports an inconsistent hit
	life   *life.Life

	next  atomic.Int64 // the rate cap's schedule (see take)
	queue chan timed[S]
	start sync.Once
	open  atomic.Int64 // checks queued and not ended (tests wait for 0)

	sampled, inconsistent atomic.Uint64
}

// A timed is a check waiting for its next step, due at near.Now() due.
type timed[S any] struct {
	due int64
	s   S
}

// A got is a check's read of a value key: its bytes, or an error
// (redis.Nil: none).
type got struct {
	b   []byte
	err error
}

func newChecker[S any](l *life.Life, fraction float64) *checker[S] {
	return &checker[S]{limit: uint64(fraction * (1 << 53)), life: l, queue: make(chan timed[S], checkQueue)}
}

// pick reports whether the hit that read the hit counter n is checked (see
// mix).
func (k *checker[S]) pick(n uint64) bool { return k != nil && mix(n) < k.limit }

// mix is what picks a hit by its count n: the 53 high bits of n times
// 2⁶⁴/φ (a Weyl step), below fraction·2⁵³ for a picked hit (every hit at a
// fraction of 1). Consecutive counts land evenly over the range, so that
// one hit in 1/fraction is picked, whatever the pattern of the hits. It
// costs a multiplication.
func mix(n uint64) uint64 { return (n * 0x9E3779B97F4A7C15) >> 11 }

// take reports whether a check may begin at now (near.Now()): at most
// checkRate a second, checkBurst at once (a token bucket, kept as the
// time its next token is due: GCRA). A picked hit that may not is dropped
// before anything is copied: a near tier answering millions of hits a
// second at a fraction of 0.01 would otherwise make tens of thousands of
// reads a second in the background.
func (k *checker[S]) take(now int64) bool {
	const every = int64(time.Second / checkRate)
	for {
		due := k.next.Load()
		if now < due-(checkBurst-1)*every {
			return false
		}
		if k.next.CompareAndSwap(due, max(due, now)+every) {
			return true
		}
	}
}

// offer queues s, a hit made at now, for its check, without blocking the
// caller: a full queue drops it, uncounted. The first offer starts the
// checker's goroutine (none once the Cache is closed).
func (k *checker[S]) offer(now int64, s S) {
	k.start.Do(func() { k.life.Go(func() { k.run(k.life.Context()) }) })
	k.open.Add(1) // before the send: the check may end before this returns
	select {
	case k.queue <- timed[S]{due: now + int64(k.delays[0]), s: s}:
	default:
		k.open.Add(-1)
	}
}

// run runs the checks until ctx ends (Close). A step's delay is the same
// for every check, so the checks waiting for a step are due in the order
// they came: a FIFO per step. While any waits, it wakes every checkTick,
// takes the hits queued meanwhile and runs the steps due; while none
// does, it waits for a hit. So it wakes at most 50 times a second, however
// many checks it makes, and each round's reads share a round trip.
func (k *checker[S]) run(ctx context.Context) {
	var wait [2][]timed[S]
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
	drain:
		for {
			select {
			case t := <-k.queue:
				k.push(&wait[0], t)
			default:
				break drain
			}
		}
		for i := range wait {
			n := 0
			for n < len(wait[i]) && wait[i][n].due <= near.Now() {
				n++
			}
			if n > 0 {
				k.round(ctx, i, wait[i][:n], &wait)
				clear(wait[i][:n]) // let go of what they hold
				wait[i] = wait[i][n:]
			}
		}
		intake, d := (<-chan timed[S])(nil), checkTick
		if len(wait[0])+len(wait[1]) == 0 {
			intake, d = k.queue, time.Hour
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
		case t := <-intake:
			k.push(&wait[0], t)
		case <-timer.C:
		}
	}
}

// push appends t to w, or drops it if w is full.
func (k *checker[S]) push(w *[]timed[S], t timed[S]) {
	if len(*w) < checkPending {
		*w = append(*w, t)
	} else {
		k.open.Add(-1)
	}
}

// round runs step i of the checks ts, after their reads, if the step has
// any, in one round trip.
func (k *checker[S]) round(ctx context.Context, i int, ts []timed[S], wait *[2][]timed[S]) {
	var gots []got
	if k.reads[i] != nil {
		vks := make([]string, len(ts))
		for j := range ts {
			vks[j] = k.reads[i](&ts[j].s)
		}
		gots = k.read(ctx, vks)
	} else {
		gots = make([]got, len(ts))
	}
	for j := range ts {
		k.step(ctx, i, &ts[j].s, gots[j], wait)
	}
}

// step runs step i of the check of s, and counts, reports, or schedules
// the next step.
func (k *checker[S]) step(ctx context.Context, i int, s *S, g got, wait *[2][]timed[S]) {
	switch k.steps[i](ctx, s, g) {
	case checkOK:
		k.sampled.Add(1)
	case checkBad:
		k.sampled.Add(1)
		k.inconsistent.Add(1)
		k.bad(ctx, s)
	case checkNext:
		if j := i + 1; j < len(wait) && k.steps[j] != nil {
			k.push(&wait[j], timed[S]{due: near.Now() + int64(k.delays[j]), s: *s})
			return
		}
	}
	k.open.Add(-1)
}

// counts returns the checks made and the inconsistent hits they found.
func (k *checker[S]) counts() (sampled, inconsistent uint64) {
	if k == nil {
		return 0, 0
	}
	return k.sampled.Load(), k.inconsistent.Load()
}

// checks are a Cache's checkers; nil without WithConsistencySampling (and
// a near tier) or WithSourceCheck.
type checks[T any] struct {
	limit  uint64                    // the larger checker's limit: a hit whose mix is above goes no further
	near   *checker[nearSample]      // WithConsistencySampling; nil: off
	source *checker[sourceSample[T]] // WithSourceCheck; nil: off
	verify func(ctx context.Context, key string) (T, error)
}

// newChecks returns the checks of c's options, or nil if there are none.
func (c *core[T]) newChecks() *checks[T] {
	k := &checks[T]{}
	if c.opts.nearCheck > 0 && c.near != nil {
		k.near = c.newNearChecker()
	}
	if c.opts.sourceCheck > 0 {
		k.verify = mustVerify[T](c.opts.verify)
		k.source = c.newSourceChecker()
	}
	if k.near == nil && k.source == nil {
		return nil
	}
	if k.near != nil {
		k.limit = k.near.limit
	}
	if k.source != nil {
		k.limit = max(k.limit, k.source.limit)
	}
	return k
}

// stats copies the checks' counters into st.
func (k *checks[T]) stats(st *Stats) {
	if k != nil {
		st.NearSampled, st.NearInconsistent = k.near.counts()
		st.SourceSampled, st.SourceInconsistent = k.source.counts()
	}
}

// sampleNear offers a near hit of key to the checkers that pick it, if
// they may begin a check. n is the hit count that emit's increment
// returned: picking a near hit costs no other access to shared memory (a
// read of the counter after the increment, one more contended cache line
// on every hit, cost a hot key at 16 goroutines 8 % of its near hits on
// two cores: bench/HISTORY.md, issue 42). emit calls it only if mix(n) is
// below checks.limit.
//
// The entry is looked up again here, for the few hits that are checked,
// rather than handed over by every hit: it is the one served, unless an
// invalidation came within these nanoseconds; then the check is of the
// entry the tier serves now, or of none.
func (c *core[T]) sampleNear(key string, n uint64) {
	now := near.Now()
	kn, ks := c.checks.near, c.checks.source
	toNear, toSource := kn.pick(n) && kn.take(now), ks.pick(n) && ks.take(now)
	if !toNear && !toSource {
		return
	}
	vk := c.valueKey(key)
	e, ok := c.near.store.GetIfPresent(vk)
	if !ok {
		return
	}
	if toNear {
		kn.offer(now, nearSample{key: key, vk: vk, sum: e.sum, until: e.until})
	}
	if toSource {
		ks.offer(now, sourceSample[T]{key: key, vk: vk, v: e.v, notFound: e.notFound, sum: e.sum, near: true})
	}
}

// sampleRead offers a hit that served b, read from Redis, to the source
// check, if it picks it; a stale hit is knowingly old, and never checked.
// b is not copied: nothing writes the bytes of a read after it.
func (c *core[T]) sampleRead(key string, b []byte, stale bool) {
	if k := c.checks.source; !stale && k.pick(c.stats.hits.Load()) {
		if now := near.Now(); k.take(now) {
			k.offer(now, sourceSample[T]{key: key, b: b})
		}
	}
}
