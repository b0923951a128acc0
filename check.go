package dogpile

// Checking sampled hits in the background: the checkers of a Cache's
// WithConsistencySampling (here) and WithSourceCheck (sourcecheck.go), run
// by internal/check.

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// checkTimeout bounds a round of checks' reads of Redis.
const checkTimeout = time.Second

// WithConsistencySampling measures the near tier's ([WithNearCache])
// consistency: about fraction of its hits are checked against Redis in the
// background, counted in [Stats].NearSampled. A hit whose value Redis no
// longer holds, and which the tier still serves once its bound (100 ms) has
// passed, missed an invalidation: it counts in [Stats].NearInconsistent and
// reaches the observer as an [EventInconsistent] (Near set). A check costs
// a GET; at most 200 begin a second, none while Redis is unreachable.
// Without a near tier nothing is checked. It panics unless 0 < fraction <= 1.
func WithConsistencySampling(fraction float64) Option {
	if !(fraction > 0 && fraction <= 1) {
		panic(fmt.Sprintf("dogpile: WithConsistencySampling(%v): the fraction is not in (0, 1] (a programmer error)", fraction))
	}
	return optionFunc(func(o *options) { o.nearCheck = fraction })
}

// A nearSample is a near hit to check: its key, and the entry it served,
// known by the sum of its bytes and its deadline in the tier (the same
// bytes read twice are two entries).
type nearSample struct {
	key, vk string
	sum     uint32
	until   int64
}

// newNearChecker returns WithConsistencySampling's checker: it reads the
// value from Redis, and if Redis holds other bytes, looks at the tier
// again the bound later (the tier's MaxLag, 100 ms by default).
func (c *core[T]) newNearChecker() *check.Checker[nearSample] {
	bad := func(ctx context.Context, s *nearSample) {
		c.emit(ctx, Event{Kind: EventInconsistent, Key: s.key, Near: true})
	}
	return check.New(&c.life, c.opts.nearCheck, c.checkReads, bad,
		check.Step[nearSample]{Key: func(s *nearSample) string { return s.vk }, Run: c.nearAgainstRedis},
		check.Step[nearSample]{After: c.near.Tracker().Config().MaxLag, Run: c.nearStillServed})
}

// nearAgainstRedis is a near check's first step, given what Redis holds
// (g): if it holds the bytes the tier served, the hit was consistent. If
// not, a write replaced them, and the tier may not have heard of it yet:
// the next step decides.
func (c *core[T]) nearAgainstRedis(_ context.Context, s *nearSample, g check.Got) check.Verdict {
	switch {
	case g.Err != nil && g.Err != redis.Nil:
		return check.Drop
	case g.Err == nil && c.near.Sum(g.B) == s.sum:
		return check.OK
	}
	return check.Next
}

// nearStillServed is a near check's second step, the tier's bound after
// Redis was seen holding other bytes than the hit served (or none): had
// the write's invalidation arrived, or tracking been lost, the tier would
// no longer serve that entry. If it still would, the hit was inconsistent,
// and stays so past the bound.
func (c *core[T]) nearStillServed(_ context.Context, s *nearSample, _ check.Got) check.Verdict {
	if c.near.Holds(s.vk, s.sum, s.until) {
		return check.Bad
	}
	return check.OK
}

// checkReads GETs the value keys vks of a round of checks, in one
// pipeline (one round trip per node), bounded by checkTimeout. While the
// client's circuit is open it sends nothing: a check would be a probe of
// the outage on no caller's behalf (see ErrUnavailable), and the answer
// unknown.
func (c *core[T]) checkReads(ctx context.Context, vks []string) []check.Got {
	gs := make([]check.Got, len(vks))
	fail := func(err error) []check.Got {
		for i := range gs {
			gs[i].Err = err
		}
		return gs
	}
	if c.breaker.Open() {
		return fail(ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	done, err := c.breaker.Allow(ctx)
	if err != nil {
		return fail(err)
	}
	cmds := make([]*redis.StringCmd, len(vks))
	err = redisutil.Pipelined(ctx, c.client, func(p redis.Pipeliner) {
		for i, vk := range vks {
			cmds[i] = p.Get(ctx, vk)
		}
	})
	done(err)
	for i, cmd := range cmds {
		gs[i].B, gs[i].Err = notString(cmd.Bytes())
	}
	return gs
}

// checks are a Cache's checkers; nil without WithConsistencySampling (and
// a near tier) or WithSourceCheck.
type checks[T any] struct {
	limit  uint64                          // the larger checker's limit: a hit whose mix is above goes no further
	near   *check.Checker[nearSample]      // WithConsistencySampling; nil: off
	source *check.Checker[sourceSample[T]] // WithSourceCheck; nil: off
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
	k.limit = max(k.near.Limit(), k.source.Limit())
	return k
}

// stats copies the checks' counters into st.
func (k *checks[T]) stats(st *Stats) {
	if k != nil {
		st.NearSampled, st.NearInconsistent = k.near.Counts()
		st.SourceSampled, st.SourceInconsistent = k.source.Counts()
	}
}

// sampleNear offers a near hit of key to the checkers that pick it, if
// they may begin a check. n is the hit count that emit's increment
// returned: picking a near hit costs no other access to shared memory (a
// read of the counter after the increment, one more contended cache line
// on every hit, cost a hot key at 16 goroutines 8 % of its near hits on
// two cores: bench/HISTORY.md, issue 42). emit calls it only if check.Mix(n) is
// below checks.limit.
//
// The entry is looked up again here, for the few hits that are checked,
// rather than handed over by every hit: it is the one served, unless an
// invalidation came within these nanoseconds; then the check is of the
// entry the tier serves now, or of none.
func (c *core[T]) sampleNear(key string, n uint64) {
	now := near.Now()
	kn, ks := c.checks.near, c.checks.source
	toNear, toSource := kn.Pick(n) && kn.Take(now), ks.Pick(n) && ks.Take(now)
	if !toNear && !toSource {
		return
	}
	vk := c.valueKey(key)
	e, ok := c.near.Peek(vk)
	if !ok {
		return
	}
	if toNear {
		kn.Offer(now, nearSample{key: key, vk: vk, sum: e.Sum, until: e.Until})
	}
	if toSource {
		ks.Offer(now, sourceSample[T]{key: key, vk: vk, v: e.V, notFound: e.NotFound, sum: e.Sum, near: true})
	}
}

// sampleRead offers a hit that served b, read from Redis, which emitRead
// counted n and found not stale, to the source check, if it picks it. b is
// not copied: nothing writes the bytes of a read after it.
func (c *core[T]) sampleRead(key string, b []byte, n uint64) {
	if k := c.checks.source; k.Pick(n) {
		if now := near.Now(); k.Take(now) {
			k.Offer(now, sourceSample[T]{key: key, b: b})
		}
	}
}
