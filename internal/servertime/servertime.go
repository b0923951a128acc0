// Package servertime estimates what time it is on the Redis servers, so that
// a deadline a server wrote in its own clock (an entry's expiry, stamped by
// the store script) can be read against it without asking for the key's
// PTTL: a hit with freshness options is then one GET, not a GET and a PTTL.
//
// No client clock is trusted. Each node's offset from this process's
// monotonic clock is bracketed by a TIME round trip: the server read its
// clock somewhere between the send and the reply. A Clock keeps the union of
// the brackets of every node (a Cluster's masters need not agree), widened
// as the sample ages by the fastest rate NTP slews a clock (500 ppm), and
// answers only while that interval is narrow and recent: otherwise the
// caller reads the PTTL as before. Before its first sample it checks that
// the servers' expiries follow their clock at all: a fake server's (an
// in-process one whose time is moved by hand, such as miniredis's
// FastForward) may not, and then the Clock never answers.
package servertime

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// Period is how often a Clock in use is sampled again.
	Period = time.Second
	// MaxAge is how old a sample may be and still be used: past it (the
	// servers unreachable, say) the caller reads PTTLs again.
	MaxAge = 5 * time.Second
	// MaxWidth is the widest uncertainty a Clock answers with: past it (a
	// slow round trip, nodes whose clocks disagree), the caller reads PTTLs.
	MaxWidth = 20 * time.Millisecond
	// slewPPM is the fastest a clock drifts from another, in parts per
	// million: the most NTP slews one (clock steps are not bounded; see
	// "The server's clock" in docs/design.md).
	slewPPM = 500
	// margin covers the millisecond resolution of a deadline and of Redis's
	// expiry, and the time between a script's start (when Redis dates a
	// SET's expiry) and its TIME call.
	margin = 2 * time.Millisecond
	// Slack is the most Remaining's answer may fall short of the time
	// truly left.
	Slack = MaxWidth + margin
	// MaxDeadline is the latest deadline Remaining takes (unix ms): in ns,
	// it still fits an int64.
	MaxDeadline = math.MaxInt64 / int64(time.Millisecond)
)

// base is the origin of mono.
var base = time.Now()

// mono is this process's monotonic clock, in ns.
func mono() int64 { return int64(time.Since(base)) }

// clocks reads this process's monotonic clock (ns since base) and how far
// its wall clock is ahead of it, in one look: the gap moves when the wall
// clock is stepped or slewed, and when the machine was suspended (the
// monotonic clock stops, the servers' does not).
func clocks() (m, gap int64) {
	now := time.Now()
	m = int64(now.Sub(base))
	return m, now.UnixNano() - m
}

// A Clock is an estimate of the servers' time. Its zero value has no
// sample and answers nothing. It is safe for concurrent use.
type Clock struct {
	s        atomic.Pointer[sample]
	sampling atomic.Bool
	tried    atomic.Int64 // mono time of the last sample's start; 0: never
	checked  atomic.Bool  // the expiries were found to follow the clock
	refused  atomic.Bool  // they were not: the Clock never answers
}

// A sample bounds server time − mono: within [lo, hi] at mono time at, for
// every node sampled. gap is clocks' gap then.
type sample struct{ lo, hi, at, gap int64 }

// maxGapMove is how far clocks' gap may move after a sample before the
// sample is refused: this process slept, or its clock was stepped.
const maxGapMove = int64(time.Millisecond)

// usable reports whether s may be used at mono time now, when clocks' gap
// is gap: recent, narrow enough, and taken since the process last slept.
func (s *sample) usable(now, gap int64) bool {
	return now-s.at <= int64(MaxAge) && s.width(now) <= int64(MaxWidth) &&
		max(gap-s.gap, s.gap-gap) <= maxGapMove
}

// width is the uncertainty of s at mono time now: its interval widened by
// the drift since it was taken, on both sides.
func (s *sample) width(now int64) int64 {
	return s.hi - s.lo + 2*drift(now-s.at)
}

func drift(age int64) int64 { return age / 1e6 * slewPPM }

// Remaining returns the lower bound of the time left until deadline (unix
// ms, in the servers' clock; below MaxDeadline), never below 0, or false
// when the Clock cannot tell: no sample, or one not usable (see usable).
func (c *Clock) Remaining(deadline int64) (time.Duration, bool) {
	s := c.s.Load()
	if s == nil || c.refused.Load() {
		return 0, false
	}
	now, gap := clocks()
	if !s.usable(now, gap) {
		return 0, false
	}
	latest := now + s.hi + drift(now-s.at) + int64(margin)
	return time.Duration(max(deadline*int64(time.Millisecond)-latest, 0)), true
}

// Refused reports whether the servers' expiries were found not to follow
// their clock (see FollowsClock): the Clock never answers.
func (c *Clock) Refused() bool { return c.refused.Load() }

// Check reports whether Remaining answers now (ready), and whether the
// caller should sample the Clock now (due): it never tried, or last tried,
// successfully or not, over Period ago, and no sample is being taken. A
// true due reserves the sample: the caller must call Sample. One call per
// read, with one look at the clock: it is on every hit's path.
func (c *Clock) Check() (ready, due bool) {
	if c.refused.Load() {
		return false, false
	}
	now, gap := clocks()
	if s := c.s.Load(); s != nil {
		ready = s.usable(now, gap)
	}
	if t := c.tried.Load(); t != 0 && now-t < int64(Period) || !c.sampling.CompareAndSwap(false, true) {
		return ready, false
	}
	c.tried.Store(now)
	return ready, true
}

// Sample asks every node each visits for its TIME and keeps the result if
// it bounds the servers' time more narrowly than the sample held, aged to
// now. A node that does not answer leaves the held sample as it was: a
// sample must cover every node. Until check has answered, Sample first
// asks it whether the servers' expiries follow their clock (see
// FollowsClock); if they do not, the Clock never answers.
func (c *Clock) Sample(ctx context.Context, each func(context.Context, func(context.Context, *redis.Client) error) error, check func(context.Context) (bool, error)) error {
	defer c.sampling.Store(false)
	if !c.checked.Load() {
		ok, err := check(ctx)
		if err != nil {
			return err
		}
		if !ok {
			c.refused.Store(true)
			return nil
		}
		c.checked.Store(true)
	}
	_, gap := clocks()
	var b bracket
	err := each(ctx, func(ctx context.Context, n *redis.Client) error {
		t0 := mono()
		st, err := n.Time(ctx).Result()
		if err != nil {
			return err
		}
		b.add(t0, st.UnixNano(), mono())
		return nil
	})
	if err != nil {
		return err
	}
	s := b.sample()
	if _, now := clocks(); s == nil || max(now-gap, gap-now) > maxGapMove {
		return nil // no node, or this process slept meanwhile: try again later
	}
	s.gap = gap
	c.keep(s)
	return nil
}

// keep holds s, unless s is too wide to answer with: then the held sample
// ages on. A narrower older sample is not kept over s, so that a server
// clock stepped by hand is followed at the next sample.
func (c *Clock) keep(s *sample) {
	if s != nil && s.width(s.at) <= int64(MaxWidth) {
		c.s.Store(s)
	}
}

// A bracket gathers the nodes' answers of one Sample, concurrently (a
// Cluster's masters are asked in parallel).
type bracket struct {
	mu sync.Mutex
	s  *sample
}

// add counts a node that answered server (unix ns) to a request sent at
// mono time t0 whose reply came at t1.
func (b *bracket) add(t0, server, t1 int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lo, hi := server-t1, server-t0
	if b.s == nil {
		b.s = &sample{lo: lo, hi: hi, at: t0}
		return
	}
	b.s.lo, b.s.hi, b.s.at = min(b.s.lo, lo), max(b.s.hi, hi), min(b.s.at, t0)
}

func (b *bracket) sample() *sample {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s
}

// probeTTL is the TTL of FollowsClock's key, and probeWait how long it waits
// before reading the key's PTTL again: long enough for a millisecond PTTL
// to show it.
const (
	probeTTL  = time.Minute
	probeWait = 5 * time.Millisecond
)

// FollowsClock reports whether the server behind rc counts its keys'
// TTLs down as time passes, with a key of that name that it sets and
// deletes: the key's TTL must have fallen between its SET and a PTTL
// probeWait later by what the clock says passed, within a millisecond
// either way. One whose keys expire by an in-process fake's hand does not:
// miniredis keeps a TTL until FastForward, and then drops it by whatever
// the test says.
func FollowsClock(ctx context.Context, rc redis.Cmdable, key string) (bool, error) {
	before := time.Now()
	if err := rc.Set(ctx, key, "", probeTTL).Err(); err != nil {
		return false, err
	}
	defer rc.Del(context.WithoutCancel(ctx), key)
	set := time.Now()
	t := time.NewTimer(probeWait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
	}
	asked := time.Now()
	p, err := rc.PTTL(ctx, key).Result()
	if err != nil {
		return false, err
	}
	// The server set the key after before and read its TTL before now; and
	// in between, at least from set to asked passed.
	fell := probeTTL - p
	return fell >= asked.Sub(set)-time.Millisecond && fell <= time.Since(before)+time.Millisecond, nil
}
