package dogpile

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/servertime"
)

// nearHit answers a call for key from the near tier, if it holds a live
// value for vk (see near.Tier.Hit), or, with kept, if the tier kept a copy
// while Redis is down (see downHit): a Fetch of a Cache that would compute
// without Redis (WithComputeWhenDown) is served the copy, not a compute;
// FetchMany and Get are not (see WithStaleIfDown). The event is emitted
// here by a direct call, not through a function value: the near hit is
// the cheapest path there is (bench/README.md, "Near-cache hits").
func (c *core[T]) nearHit(ctx context.Context, key, vk string, kept bool) (v T, err error, ok bool) {
	v, tomb, ok := c.near.Hit(vk)
	if !ok {
		if kept {
			return c.downHit(ctx, key, vk)
		}
		return v, nil, false
	}
	c.emit(ctx, Event{Kind: EventHit, Key: key, Near: true, NotFound: tomb})
	if tomb {
		return v, errNotFound(key), true
	}
	return v, nil, true
}

// downHit answers a Fetch of key with the near tier's kept copy of vk, if
// Redis is unreachable and the tier has one (see near.Tier.DownHit).
func (c *core[T]) downHit(ctx context.Context, key, vk string) (v T, err error, ok bool) {
	v, tomb, ok := c.near.DownHit(vk)
	if !ok {
		return v, nil, false
	}
	c.stats.staleIfDown.Add(1)
	c.emit(ctx, Event{Kind: EventHit, Key: key, Near: true, Stale: true, NotFound: tomb})
	if tomb {
		return v, errNotFound(key), true
	}
	return v, nil, true
}

// read is the hit path's round trip: a GET, which tells the value's
// remaining TTL when freshness options or the near tier need it (see
// readRedis). pttl is negative when it was not read or the key has no TTL. With
// the near tier, o is the Owner of the value when it was read on a tracked
// connection (see near.Owner), nil otherwise; before a read on another,
// the flight cl (named id) is made one no later caller joins. It goes through the client's circuit breaker
// (see ErrUnavailable) without a closure, which would cost every hit an
// allocation.
func (c *core[T]) read(ctx context.Context, vk string, id flightID, cl *call) (b []byte, pttl time.Duration, o *near.Owner, err error) {
	done, err := c.allow(ctx)
	if err != nil {
		return nil, -1, nil, err
	}
	b, pttl, o, err = c.readHit(ctx, vk, id, cl)
	c.report(done, err)
	return b, pttl, o, err
}

// allow asks the client's breaker whether a call may go to Redis (see
// Breaker.Allow), counting the calls it turns away. read and readMany use
// it and report directly, with no closure on the hit path.
func (c *core[T]) allow(ctx context.Context) (func(error), error) {
	done, err := c.breaker.Allow(ctx)
	if err != nil {
		c.stats.unavailable.Add(1)
	}
	return done, err
}

// report hands the outcome of an allowed call's round trip to the breaker,
// which logs the outage it began or ended, if any.
func (c *core[T]) report(done func(error), err error) { done(err) }

// pickReader chooses the hit's round trip from the options, which never
// change: a near tier reads on its tracked connections (readNear), a
// Cache with freshness options reads the TTL too (readRedis), any other a
// bare GET.
func (c *core[T]) pickReader() hitReader {
	switch {
	case c.near != nil:
		return c.readNear
	case c.fresh != nil:
		return func(ctx context.Context, vk string, _ flightID, _ *call) ([]byte, time.Duration, *near.Owner, error) {
			b, pttl, err := c.readRedis(ctx, c.client, vk)
			return b, pttl, nil, err
		}
	}
	return func(ctx context.Context, vk string, _ flightID, _ *call) ([]byte, time.Duration, *near.Owner, error) {
		b, err := c.get(ctx, c.client, vk)
		return b, -1, nil, err
	}
}

// readNear reads vk on one of the near tier's tracked connections if one
// is free, and otherwise through the client, after making the flight cl
// one no later caller joins (see Cache.unheard): also
// when the reader could not serve the read (its node answered with an
// error, a Cluster's slot that moved; its connection failed or its session
// ended), unless ctx ended or the read timed out (the server is slow: the
// client would wait as long again).
func (c *core[T]) readNear(ctx context.Context, vk string, id flightID, cl *call) (b []byte, pttl time.Duration, o *near.Owner, err error) {
	o, err, ok := c.near.Tracker().Read(ctx, c.near.Tracker().Node(vk), func(cn redis.Cmdable) error {
		var rerr error
		b, pttl, rerr = c.readRedis(ctx, cn, vk)
		return rerr
	})
	switch {
	case ok && o != nil && !answered(err):
		return b, pttl, o, err
	case ok && err != nil && (ctx.Err() != nil || timedOut(err)):
		return nil, -1, nil, err
	}
	c.unheard(id, cl)
	b, pttl, err = c.readRedis(ctx, c.client, vk)
	return b, pttl, nil, err
}

// timedOut reports whether err is a network timeout.
func timedOut(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// answered reports whether err is an error reply other than redis.Nil:
// the node could not serve the read.
func answered(err error) bool {
	return err != nil && err != redis.Nil && near.IsReply(err)
}

// With WithStale, WithEarlyRefresh or WithNearCache a hit needs the value's
// remaining TTL as well as the value. Reading it with a PTTL pipelined
// with the GET costs a second command per hit (see bench/README.md, "Hits
// with freshness options"). Instead, such a Cache writes version 3 entries,
// whose expiry the store script stamps in the server's clock (see
// stampLua), and reads it against its estimate of that clock (see
// servertime): one GET. It falls back to the pipelined PTTL while the
// estimate is missing, old or too uncertain, and for an entry without an
// expiry (written by a Cache without those options).

// readRedis is read's round trip on rc, behind the circuit breaker: a GET,
// and when the remaining TTL is needed and cannot be read from the entry,
// a PTTL pipelined with it (one slot, one round trip).
func (c *core[T]) readRedis(ctx context.Context, rc redis.Cmdable, vk string) (b []byte, pttl time.Duration, err error) {
	f := c.fresh
	if f == nil {
		b, err = c.get(ctx, rc, vk)
		return b, -1, err
	}
	if c.readyClock() && !f.PTTLFirst.Load() {
		if b, err = c.get(ctx, rc, vk); err != nil {
			return nil, -1, err
		}
		if pttl, ok := f.Remaining(b); ok {
			return b, pttl, nil
		}
		f.PTTLFirst.Store(true)
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
	if f.PTTLFirst.Load() && entry.Deadline(b) != 0 {
		f.PTTLFirst.Store(false)
	}
	if pttl, err = pt.Result(); err != nil || pttl < 0 {
		return b, -1, nil // a value without a TTL is never stale
	}
	return b, pttl, nil
}

// readyClock reports whether remaining TTLs can be read from entries now,
// and samples the servers' clock when it is due (see
// servertime.Clock.Check), on a goroutine of its own that Close does not
// wait for: a server frozen under a client without read timeouts would
// hold it, and Close with it. Its context ends at Close or after
// servertime.Period, but go-redis does not bound a request that went out
// by its context (unless ContextTimeoutEnabled): the client's read timeout
// does.
func (c *core[T]) readyClock() bool {
	ready, due := c.fresh.Clock.Check()
	if !due {
		return ready
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.life.Context(), servertime.Period)
		defer cancel()
		_ = c.fresh.Clock.Sample(ctx, func(ctx context.Context, f func(context.Context, *redis.Client) error) error {
			return redisutil.ForEachNode(ctx, c.client, f)
		}, func(ctx context.Context) (bool, error) {
			return servertime.FollowsClock(ctx, c.client, c.opts.prefix+"clock-probe:"+redisutil.Token())
		})
	}()
	return ready
}

// get GETs vk on rc: in a batch of the Cache's GETs when rc is the
// Cache's client, alone on any other (a near tier's tracked connection).
func (c *core[T]) get(ctx context.Context, rc redis.Cmdable, vk string) ([]byte, error) {
	if rc != redis.Cmdable(c.client) {
		return notString(rc.Get(ctx, vk).Bytes())
	}
	return notString(c.gets.Get(ctx, c.client, vk))
}

// notString turns the reply of a GET of a value key that holds another
// type than a string (a list, a hash: something else wrote it under the
// prefix) into bytes that do not decode: a miss, like any foreign value,
// counted in Stats.DecodeErrors and overwritten by the compute's store (a
// SET, which replaces any type), not an error on every call. The scripts
// read such a key as none (see lookLua).
func notString(b []byte, err error) ([]byte, error) {
	if err != nil && err != redis.Nil && redis.HasErrorPrefix(err, "WRONGTYPE") {
		return []byte{}, nil
	}
	return b, err
}

// checkTimeout bounds a round of checks' reads of Redis.
const checkTimeout = time.Second

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
