package dogpile

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/servertime"
)

// With WithStale, WithEarlyRefresh or WithNearCache a hit needs the value's
// remaining TTL as well as the value. Reading it with a PTTL pipelined
// with the GET costs a second command per hit (see bench/README.md, "Hits
// with freshness options"). Instead, such a Cache writes version 3 entries,
// whose expiry the store script stamps in the server's clock (see
// stampLua), and reads it against its estimate of that clock (see
// servertime): one GET. It falls back to the pipelined PTTL while the
// estimate is missing, old or too uncertain, and for an entry without an
// expiry (written by a Cache without those options).

// freshRead is what a Cache with freshness options keeps to read a value's
// remaining TTL from its entry.
type freshRead struct {
	clock servertime.Clock
	// pttlFirst is set when a GET found an entry without an expiry: the
	// next reads pipeline a PTTL again, until one finds an expiry.
	pttlFirst atomic.Bool
}

// deadlineOf returns the expiry stamped in entry b, unix ms in the server's
// clock, or 0 if it carries none.
func deadlineOf(b []byte) int64 {
	if !hasExpiry(b) {
		return 0
	}
	if d := binary.BigEndian.Uint64(b[headerLen:]); d <= uint64(servertime.MaxDeadline) {
		return int64(d)
	}
	return 0
}

// remaining is the least time entry b has left in Redis, from its expiry
// and the clock, or false if either cannot tell.
func (f *freshRead) remaining(b []byte) (time.Duration, bool) {
	d := deadlineOf(b)
	if d == 0 {
		return 0, false
	}
	return f.clock.Remaining(d)
}

// readRedis is read's round trip on rc, behind the circuit breaker: a GET,
// and when the remaining TTL is needed and cannot be read from the entry,
// a PTTL pipelined with it (one slot, one round trip).
func (c *Cache[T]) readRedis(ctx context.Context, rc redis.Cmdable, vk string) (b []byte, pttl time.Duration, err error) {
	f := c.fresh
	if f == nil {
		b, err = c.get(ctx, rc, vk)
		return b, -1, err
	}
	if c.readyClock() && !f.pttlFirst.Load() {
		if b, err = c.get(ctx, rc, vk); err != nil {
			return nil, -1, err
		}
		if pttl, ok := f.remaining(b); ok {
			return b, pttl, nil
		}
		f.pttlFirst.Store(true)
		// The entry has no expiry (or the clock aged meanwhile): ask.
		if pttl, err = rc.PTTL(ctx, vk).Result(); err != nil || pttl < 0 {
			return b, -1, nil // a value without a TTL is never stale
		}
		return b, pttl, nil
	}
	var get *redis.StringCmd
	var pt *redis.DurationCmd
	err = redisutil.Pipelined(ctx, rc, func(p redis.Pipeliner) {
		get, pt = p.Get(ctx, vk), p.PTTL(ctx, vk)
	})
	if b, err = notString(get.Bytes()); err != nil {
		return nil, -1, err
	}
	if f.pttlFirst.Load() && deadlineOf(b) != 0 {
		f.pttlFirst.Store(false)
	}
	if pttl, err = pt.Result(); err != nil || pttl < 0 {
		return b, -1, nil // a value without a TTL is never stale
	}
	return b, pttl, nil
}

// readManyRedis is readMany's round trip on rc, behind the circuit
// breaker: an MGET per slot group, and a PTTL per key if the remaining
// TTLs are needed and cannot be read from the entries (see readRedis). It
// returns the pipeline's first error; each key has its own in rs.
func (c *Cache[T]) readManyRedis(ctx context.Context, rc redis.Cmdable, vks []string, rs []read) error {
	groups := slotGroups(c.client, vks)
	gets := make([]*redis.SliceCmd, len(groups))
	var pttls []*redis.DurationCmd
	fromEntry := false
	if f := c.fresh; f != nil {
		if fromEntry = c.readyClock() && !f.pttlFirst.Load(); !fromEntry {
			pttls = make([]*redis.DurationCmd, len(vks))
		}
	}
	err := redisutil.Pipelined(ctx, rc, func(p redis.Pipeliner) {
		for gi, g := range groups {
			ks := vks // a single server: one group, every key in order
			if len(g) != len(vks) {
				ks = make([]string, len(g))
				for n, i := range g {
					ks[n] = vks[i]
				}
			}
			gets[gi] = p.MGet(ctx, ks...)
		}
		for i := range pttls {
			pttls[i] = p.PTTL(ctx, vks[i])
		}
	})
	for gi, g := range groups {
		vals, gerr := gets[gi].Result()
		for n, i := range g {
			r := &rs[i]
			r.pttl = -1
			switch {
			case gerr != nil:
				r.err = gerr
			case vals[n] == nil:
				r.err = redis.Nil
			default:
				s, _ := vals[n].(string)
				r.b = []byte(s)
			}
			if pttls != nil && r.err == nil {
				if c.fresh.pttlFirst.Load() && deadlineOf(r.b) != 0 {
					c.fresh.pttlFirst.Store(false)
				}
				if d, err := pttls[i].Result(); err == nil && d >= 0 {
					r.pttl = d // a value without a TTL is never stale
				}
			}
		}
	}
	if fromEntry {
		c.entryTTLs(ctx, rc, vks, rs)
	}
	return err
}

// entryTTLs sets the remaining TTL of each value read in rs from its entry,
// and reads the PTTLs of those whose entry cannot tell, in one more round
// trip.
func (c *Cache[T]) entryTTLs(ctx context.Context, rc redis.Cmdable, vks []string, rs []read) {
	var ask []int
	for i := range rs {
		if rs[i].err != nil {
			continue
		}
		if d, ok := c.fresh.remaining(rs[i].b); ok {
			rs[i].pttl = d
		} else {
			ask = append(ask, i)
		}
	}
	if len(ask) == 0 {
		return
	}
	c.fresh.pttlFirst.Store(true)
	cmds := make([]*redis.DurationCmd, len(ask))
	_ = redisutil.Pipelined(ctx, rc, func(p redis.Pipeliner) {
		for n, i := range ask {
			cmds[n] = p.PTTL(ctx, vks[i])
		}
	})
	for n, i := range ask {
		if d, err := cmds[n].Result(); err == nil && d >= 0 {
			rs[i].pttl = d // a value without a TTL is never stale
		}
	}
}

// readyClock reports whether remaining TTLs can be read from entries now,
// and samples the servers' clock when it is due (see
// servertime.Clock.Check), on a goroutine of its own that Close does not
// wait for: a server frozen under a client without read timeouts would
// hold it, and Close with it. Its context ends at Close or after
// servertime.Period, but go-redis does not bound a request that went out
// by its context (unless ContextTimeoutEnabled): the client's read timeout
// does.
func (c *Cache[T]) readyClock() bool {
	ready, due := c.fresh.clock.Check()
	if !due {
		return ready
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.life.ctx, servertime.Period)
		defer cancel()
		_ = c.fresh.clock.Sample(ctx, func(ctx context.Context, f func(context.Context, *redis.Client) error) error {
			return forEachNode(ctx, c.client, f)
		}, func(ctx context.Context) (bool, error) {
			return servertime.FollowsClock(ctx, c.client, c.opts.prefix+"clock-probe:"+redisutil.Token())
		})
	}()
	return ready
}
