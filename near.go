package dogpile

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/redis/go-redis/v9"
)

// WithNearCache keeps up to maxEntries decoded values in process memory, so
// that Fetch and FetchMany answer a key read moments ago without a round
// trip (Get always reads Redis). A write of the key by any client removes
// the copy (Redis's CLIENT TRACKING): once its invalidation arrived, no call
// here returns the replaced value, and a write that returned more than 100
// ms ago never is, however late it comes. No copy outlives the key's TTL or
// its stale or early-refresh point. Where keys cannot be tracked (Redis
// before 6.0, miniredis, a Ring, replica reads, an ACL refusing tracking:
// docs/design.md) the tier turns itself off, logged and in [Stats].NearOff.
// Near hits share one value: treat it as read-only. It panics if maxEntries
// is not positive.
func WithNearCache(maxEntries int) Option {
	if maxEntries <= 0 {
		panic(fmt.Sprintf("dogpile: near cache size %d is not positive (a programmer error)", maxEntries))
	}
	return optionFunc(func(o *options) { o.nearEntries = maxEntries })
}

// withNear sets the near tier's timings and connections (see near.Config:
// the zero Config is internal/near's defaults). It is for tests, which
// shorten them; it has no effect without WithNearCache.
func withNear(cfg near.Config) Option {
	return optionFunc(func(o *options) { o.near = cfg })
}

// newNear builds c's near tier (see near.Tier): its invalidations forget
// c's flights and reach the observer; with WithStaleIfDown its copies are
// kept when tracking is lost.
func (c *core[T]) newNear() *near.Tier[T] {
	o := &c.opts
	h := near.Handlers{Forget: func(vk string) {
		if vk == "" {
			c.flights.ForgetAll()
		} else {
			c.flights.Forget(vk)
		}
	}}
	if o.observer != nil {
		h.Notify = func(vk string) {
			c.emit(context.Background(), Event{Kind: EventInvalidate, Key: c.nearKey(vk)})
		}
	}
	cfg := near.TierConfig{Entries: o.nearEntries, Stale: o.stale, Early: o.beta > 0,
		Sums: o.nearCheck > 0 || o.sourceCheck > 0, Keep: o.staleIfDown && o.stale > 0, Config: o.near}
	return near.NewTier(c.client, c.breaker, cfg, c.decodeEntry, h, c.nearOff)
}

// nearKey is the key whose value key is vk, or vk itself for a key stored
// under a hash of its name (see redisutil.Tag): "" stays "".
func (c *core[T]) nearKey(vk string) string {
	rest, ok := strings.CutPrefix(vk, c.opts.prefix)
	if name, plain := strings.CutSuffix(rest, "}"); ok && plain && strings.HasPrefix(name, "{") {
		return name[1:]
	}
	return vk
}

// nearOff records that the near tier cannot work here, and says so once.
func (c *core[T]) nearOff(reason string) {
	if c.stats.nearOff.Swap(true) {
		return
	}
	if l := c.opts.logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, "dogpile: near cache off; every Fetch reads redis",
			slog.String("prefix", c.opts.prefix), slog.String("reason", reason))
	}
}

// unheard makes cl, whose read of Redis is not tracked, a flight no later
// caller joins (see flight.Group.Join), while tracking is in place.
func (c *core[T]) unheard(id flightID, cl *call) {
	if c.near.Tracking() {
		c.flights.Unheard(id, cl)
	}
}

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
