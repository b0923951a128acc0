// Package check runs checks of sampled hits in the background, for a
// Cache's WithConsistencySampling and WithSourceCheck: which hits are
// picked, how many checks may begin, and the goroutine that runs them.
// What a check looks at is the cache's (package dogpile: near.go for
// the near tier's, check.go for the source's).
package check

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
	Rate    = 200                   // checks begun per second, at most (see Checker.Take)
	Burst   = 20                    // of which this many may begin at once
	queue   = 64                    // picked hits waiting for the checker's goroutine; one more is dropped
	pending = 512                   // checks waiting for their next step; one more is dropped
	tick    = 20 * time.Millisecond // while checks wait, the checker wakes this often, and no more
)

// A Verdict is what a step of a check found.
type Verdict int

const (
	Drop Verdict = iota // no answer (Redis down or failing, verify failed, Close): not counted
	OK                  // consistent: counted as sampled
	Bad                 // inconsistent: counted as sampled and inconsistent, and reported
	Next                // not known yet: the next step decides, after its delay
)

// A Checker runs the checks of one option on the hits it picks: one or
// two steps each, each its After after the hit or the step before. It runs them on one goroutine of the Cache
// (started by the first picked hit, ended by Close), off every caller's
// path, in rounds: the steps due at one wake-up share it, and the reads
// of Redis they need (reads[i] names the value key step i reads, if any)
// share one round trip (read).
type Checker[S any] struct {
	limit uint64 // see Pick
	steps [2]Step[S]
	read  func(ctx context.Context, vks []string) []Got
	bad   func(ctx context.Context, s *S) // reports an inconsistent hit
	life  *life.Life

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

// A Got is a check's read of a value key: its bytes, or an error
// (redis.Nil: none).
type Got struct {
	B   []byte
	Err error
}

// A Step is one step of a check: Run, After the hit (the first step) or
// the step before, given what Redis holds under Key(s) if Key is set.
type Step[S any] struct {
	After time.Duration
	Key   func(s *S) string
	Run   func(ctx context.Context, s *S, g Got) Verdict
}

// New returns a Checker that picks about fraction of the hits and checks
// them in steps (one or two) on a goroutine of l, their reads made by
// read, and calls bad with each inconsistent one.
func New[S any](l *life.Life, fraction float64, read func(ctx context.Context, vks []string) []Got, bad func(ctx context.Context, s *S), steps ...Step[S]) *Checker[S] {
	k := &Checker[S]{limit: uint64(fraction * (1 << 53)), read: read, bad: bad, life: l, queue: make(chan timed[S], queue)}
	copy(k.steps[:], steps)
	return k
}

// Limit returns k's limit (see Mix), 0 for a nil k.
func (k *Checker[S]) Limit() uint64 {
	if k == nil {
		return 0
	}
	return k.limit
}

// Open returns how many checks are queued and not ended (for tests, which
// wait for 0).
func (k *Checker[S]) Open() int64 {
	if k == nil {
		return 0
	}
	return k.open.Load()
}

// Pick reports whether the hit that read the hit counter n is checked (see
// mix).
func (k *Checker[S]) Pick(n uint64) bool { return k != nil && Mix(n) < k.limit }

// Mix is what picks a hit by its count n: the 53 high bits of n times
// 2⁶⁴/φ (a Weyl step), below fraction·2⁵³ for a picked hit (every hit at a
// fraction of 1). Consecutive counts land evenly over the range, so that
// one hit in 1/fraction is picked, whatever the pattern of the hits. It
// costs a multiplication.
func Mix(n uint64) uint64 { return (n * 0x9E3779B97F4A7C15) >> 11 }

// Take reports whether a check may begin at now (near.Now()): at most
// Rate a second, Burst at once (a token bucket, kept as the
// time its next token is due: GCRA). A picked hit that may not is dropped
// before anything is copied: a near tier answering millions of hits a
// second at a fraction of 0.01 would otherwise make tens of thousands of
// reads a second in the background.
func (k *Checker[S]) Take(now int64) bool {
	const every = int64(time.Second / Rate)
	for {
		due := k.next.Load()
		if now < due-(Burst-1)*every {
			return false
		}
		if k.next.CompareAndSwap(due, max(due, now)+every) {
			return true
		}
	}
}

// Offer queues s, a hit made at now, for its check, without blocking the
// caller: a full queue drops it, uncounted. The first offer starts the
// checker's goroutine (none once the Cache is closed).
func (k *Checker[S]) Offer(now int64, s S) {
	k.start.Do(func() { k.life.Go(func() { k.run(k.life.Context()) }) })
	k.open.Add(1) // before the send: the check may end before this returns
	select {
	case k.queue <- timed[S]{due: now + int64(k.steps[0].After), s: s}:
	default:
		k.open.Add(-1)
	}
}

// run runs the checks until ctx ends (Close). A step's delay is the same
// for every check, so the checks waiting for a step are due in the order
// they came: a FIFO per step. While any waits, it wakes every tick,
// takes the hits queued meanwhile and runs the steps due; while none
// does, it waits for a hit. So it wakes at most 50 times a second, however
// many checks it makes, and each round's reads share a round trip.
func (k *Checker[S]) run(ctx context.Context) {
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
		intake, d := (<-chan timed[S])(nil), tick
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
func (k *Checker[S]) push(w *[]timed[S], t timed[S]) {
	if len(*w) < pending {
		*w = append(*w, t)
	} else {
		k.open.Add(-1)
	}
}

// round runs step i of the checks ts, after their reads, if the step has
// any, in one round trip.
func (k *Checker[S]) round(ctx context.Context, i int, ts []timed[S], wait *[2][]timed[S]) {
	var gots []Got
	if key := k.steps[i].Key; key != nil {
		vks := make([]string, len(ts))
		for j := range ts {
			vks[j] = key(&ts[j].s)
		}
		gots = k.read(ctx, vks)
	} else {
		gots = make([]Got, len(ts))
	}
	for j := range ts {
		if ctx.Err() != nil {
			// Close: the rest of the round is dropped, not run, so that
			// Close does not wait for a verify per check left in it.
			k.open.Add(-int64(len(ts) - j))
			return
		}
		k.step(ctx, i, &ts[j].s, gots[j], wait)
	}
}

// step runs step i of the check of s, and counts, reports, or schedules
// the next step.
func (k *Checker[S]) step(ctx context.Context, i int, s *S, g Got, wait *[2][]timed[S]) {
	switch k.steps[i].Run(ctx, s, g) {
	case OK:
		k.sampled.Add(1)
	case Bad:
		k.sampled.Add(1)
		k.inconsistent.Add(1)
		k.bad(ctx, s)
	case Next:
		if j := i + 1; j < len(wait) && k.steps[j].Run != nil {
			k.push(&wait[j], timed[S]{due: near.Now() + int64(k.steps[j].After), s: *s})
			return
		}
	}
	k.open.Add(-1)
}

// Counts returns the checks made and the inconsistent hits they found.
func (k *Checker[S]) Counts() (sampled, inconsistent uint64) {
	if k == nil {
		return 0, 0
	}
	return k.sampled.Load(), k.inconsistent.Load()
}
