package dogpile

// Measuring the near tier's consistency (WithConsistencySampling): a
// sampled near hit is checked against Redis, in the background.

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// WithConsistencySampling measures the near tier's ([WithNearCache])
// consistency: of its hits, about fraction are checked against Redis in
// the background, never on the caller's path, and counted in
// [Stats].NearSampled. A hit whose value Redis no longer holds, which the
// tier would still serve once its bound (100 ms, see WithNearCache) has
// passed since Redis was seen holding another, was hidden from an
// invalidation: it is counted in [Stats].NearInconsistent and reported to
// the observer as an [EventInconsistent] with its key (Near set). A
// difference that the tier drops within the bound is a write whose
// invalidation was on its way, and is no inconsistency. A check costs a
// GET; at most 200 checks begin a second (20 at once), and a hit picked
// beyond that, or while Redis is unreachable, is not checked. Picking costs
// a hit a multiplication. Without WithNearCache, or where the tier turns
// itself off, nothing is checked. It panics unless 0 < fraction <= 1.
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
func (c *core[T]) newNearChecker() *checker[nearSample] {
	k := newChecker[nearSample](&c.life, c.opts.nearCheck)
	k.delays = [2]time.Duration{0, c.near.t.Config().MaxLag}
	k.reads = [2]func(*nearSample) string{func(s *nearSample) string { return s.vk }, nil}
	k.steps = [2]func(context.Context, *nearSample, got) verdict{c.nearAgainstRedis, c.nearStillServed}
	k.read = c.checkReads
	k.bad = func(ctx context.Context, s *nearSample) {
		c.emit(ctx, Event{Kind: EventInconsistent, Key: s.key, Near: true})
	}
	return k
}

// nearAgainstRedis is a near check's first step, given what Redis holds
// (g): if it holds the bytes the tier served, the hit was consistent. If
// not, a write replaced them, and the tier may not have heard of it yet:
// the next step decides.
func (c *core[T]) nearAgainstRedis(_ context.Context, s *nearSample, g got) verdict {
	switch {
	case g.err != nil && g.err != redis.Nil:
		return checkDrop
	case g.err == nil && c.near.sum(g.b) == s.sum:
		return checkOK
	}
	return checkNext
}

// nearStillServed is a near check's second step, the tier's bound after
// Redis was seen holding other bytes than the hit served (or none): had
// the write's invalidation arrived, or tracking been lost, the tier would
// no longer serve that entry. If it still would, the hit was inconsistent,
// and stays so past the bound.
func (c *core[T]) nearStillServed(_ context.Context, s *nearSample, _ got) verdict {
	if c.near.holds(s.vk, s.sum, s.until) {
		return checkBad
	}
	return checkOK
}

// checkReads GETs the value keys vks of a round of checks, in one
// pipeline (one round trip per node), bounded by checkTimeout. While the
// client's circuit is open it sends nothing: a check would be a probe of
// the outage on no caller's behalf (see ErrUnavailable), and the answer
// unknown.
func (c *core[T]) checkReads(ctx context.Context, vks []string) []got {
	gs := make([]got, len(vks))
	fail := func(err error) []got {
		for i := range gs {
			gs[i].err = err
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
		gs[i].b, gs[i].err = notString(cmd.Bytes())
	}
	return gs
}

// sum is the sum of an entry's bytes that the checks compare: 32 bits of
// maphash, so that it fits in a padding of nearEntry. Two different entries
// share one by a chance of 2⁻³², which makes a check miss an inconsistency
// (or, for WithSourceCheck, find one) once in four billion.
func (n *nearTier[T]) sum(b []byte) uint32 { return uint32(maphash.Bytes(n.seed, b)) }

// holds reports whether the tier would serve now, to a Fetch, the entry
// that a sampled hit of vk served (see nearSample). It counts no hit and
// does not keep the tier's tracking open.
func (n *nearTier[T]) holds(vk string, sum uint32, until int64) bool {
	now := near.Now()
	if !n.x.Up() || !n.t.Heard(now) {
		return false
	}
	e, ok := n.store.GetIfPresent(vk)
	return ok && e.sum == sum && e.until == until && now < e.until && e.owner.Live(now)
}
