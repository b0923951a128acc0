package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/flight"
	"github.com/dogpile-go/dogpile/internal/hotkeys"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/life"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

// core is the engine behind a Cache: its state, shared by the mechanism
// that the exported methods run.
type core[T any] struct {
	client  redis.UniversalClient
	opts    options
	publish string // PUBLISH or SPUBLISH, for the scripts
	flights flight.Group[outcome]
	stats   counters
	hot     hotkeys.Summary // see HotKeys

	attempts *semaphore.Weighted // bounds the lock attempts in flight (see newTurns)
	looks    looks               // picks a Fetch's first look (see looks)
	breaker  *breaker.Breaker    // the client's (see ErrUnavailable)
	gets     *roundtrip.Gets     // the client's GETs, which share pipelines
	near     *near.Tier[T]       // WithNearCache; nil: none
	space    keyspace.Space      // its keys beyond one value: tags, Clear
	fresh    *entry.Expiry       // with freshness options or a near tier; nil: none
	readHit  hitReader           // the hit's round trip, chosen by New (see pickReader)
	checks   *checks[T]          // checks of sampled hits; nil: none
	life     life.Life           // what Close ends

	// onWait, if set, is called when a flight starts waiting for another
	// process's compute (tests use it to order events without sleeping).
	onWait func(key string)
	// beforeCompute, if set, is called once the lock is held, before its
	// lease starts (tests stall the whole process there: the lease's
	// watchdog too).
	beforeCompute func(key string)
}

func (c *core[T]) keys(key string) keyspace.Keys { return keyspace.For(c.valueKey(key)) }

// valueKey is the Redis key of the value cached under key (see checkKey). A
// key without braces, the common case, is joined in one allocation: it is on
// every hit's path (bench/HISTORY.md, "Figures moved out of code comments").
func (c *core[T]) valueKey(key string) string {
	return redisutil.Key(c.opts.prefix, key)
}

// checkKey and checkTTL reject a call on a closed Cache (ErrClosed), and
// arguments that may come from data with an error matching ErrInvalid, not
// a panic: a server must not crash on a request's input.
func (c *core[T]) checkKey(key string) error {
	switch {
	case c.life.Done():
		return ErrClosed
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	return nil
}

// checkTTL also returns the ttl to use: WithDefaultTTL's for 0.
func (c *core[T]) checkTTL(key string, ttl time.Duration) (time.Duration, error) {
	if err := c.checkKey(key); err != nil {
		return 0, err
	}
	return c.validTTL(ttl, key)
}

func (c *core[T]) validTTL(ttl time.Duration, key string) (time.Duration, error) {
	switch {
	case ttl >= time.Millisecond:
		return ttl, nil
	case ttl == 0 && c.opts.defaultTTL > 0:
		return c.opts.defaultTTL, nil
	}
	// Only an invalid ttl formats the key: a valid one is every Fetch's.
	of := ""
	if key != "" {
		of = fmt.Sprintf(" of %q", key)
	}
	if ttl == 0 {
		return 0, fmt.Errorf("%w: ttl 0%s: a Cache made WithDefaultTTL gives it a meaning", ErrInvalid, of)
	}
	return 0, fmt.Errorf("%w: ttl %v%s is below 1ms", ErrInvalid, ttl, of)
}

// oneNode reports whether every key lives on one server, so that one
// script may touch a value's keys and its tags' together.
func (c *core[T]) oneNode() bool {
	_, ok := c.client.(*redis.Client)
	return ok
}

// forget makes this process read vk afresh after it wrote vk (Set, Delete,
// Refresh): once the write has returned, no later call joins a flight
// whose read or compute may predate it, and the near tier drops its copy
// before Redis's invalidation arrives. Called after the write's reply (or
// failure: it may have been applied), so that a flight started after
// forget reads after the write.
func (c *core[T]) forget(vk string) {
	c.flights.Forget(vk)
	c.near.Forget(vk)
}

// A hitReader is read's round trip, chosen once by New (see pickReader).
type hitReader func(ctx context.Context, vk string, id flightID, cl *call) (b []byte, pttl time.Duration, o *near.Owner, err error)

// How a Fetch looks for a key first, a GET or the lock script (which
// starts a miss's compute a round trip sooner, at a script's cost to the
// server), is docs/design.md's "The first look".

// looks keeps the score that picks the first look: a first look that
// misses raises it, one that hits lowers it, within [0, lookMax]. Above
// lookScript, Fetch looks with the script. A Cache starts at 0 (GETs),
// from where lookScript+1 more misses than hits move it to the script;
// from the top, lookScript more hits than misses move it back. A first
// look whose value does not decode, or that failed, is not scored. A
// hit's GET costs two atomic loads (script, then saw at the floor), no
// write. off (set by New, then read-only) keeps a Cache with freshness
// options or a near tier on GETs.
type looks struct {
	score atomic.Int32
	off   bool
}

const (
	lookMax    = 16
	lookScript = lookMax / 2
)

// script reports whether the next first look should be the lock script.
func (l *looks) script() bool { return !l.off && l.score.Load() > lookScript }

// saw records a first look's answer: a value (hit), or none.
func (l *looks) saw(hit bool) {
	for !l.off {
		s := l.score.Load()
		n := s + 1
		if hit {
			n = s - 1
		}
		if n < 0 || n > lookMax || l.score.CompareAndSwap(s, n) {
			return
		}
	}
}

// emit is where every Event goes: the Stats counters (tally), then the
// observer. It returns the context to use from here (see WithObserver).
func (c *core[T]) emit(ctx context.Context, e Event) context.Context {
	c.tally(&e)
	return c.observe(ctx, e)
}

// emitRead emits e, a hit whose entry b was read from Redis, and offers it
// to WithSourceCheck's checker, picked by the hit count its own tally gave
// it (as near hits are, in tally): a count read afterwards is shared by
// hits that raced, which would be picked or passed over together. stale
// is whether b is past its TTL, which a stale hit's check would only
// confirm; unread, that the caller did not read it (Get), so that a picked
// hit reads it from b's expiry (see staleRead), and the others pay nothing.
func (c *core[T]) emitRead(ctx context.Context, e Event, b []byte, stale, unread bool) {
	n := c.tally(&e)
	c.observe(ctx, e)
	if k := c.checks; k != nil && !stale && check.Mix(n) < k.limit && !(unread && c.staleRead(b)) {
		c.sampleRead(e.Key, b, n)
	}
}

// tally counts e in Stats and in the hot-key report, and returns the hit
// count of a hit (0 for other events). Misses, computes and waits cost a
// round trip at least and are recorded every time, so that their counts
// are exact; a hit is recorded if it is sampled (see hotkeys.Sampled),
// with the sample's weight, so that the report adds next to nothing to a
// near hit (bench/README.md, "Near-cache hits", the hot-key report).
func (c *core[T]) tally(e *Event) (n uint64) {
	s := &c.stats
	var d hotkeys.Counts
	switch e.Kind {
	case EventHit:
		n = s.hits.Add(1)
		if hotkeys.Sampled(n) {
			d.Reads = hotkeys.SampleRate
		}
		if e.Stale {
			s.stale.Add(1)
		}
		if e.Near {
			s.nearHits.Add(1)
			if k := c.checks; k != nil && !e.Stale && check.Mix(n) < k.limit {
				c.sampleNear(e.Key, n) // one hit in many (see sampleNear)
			}
		}
		if e.NotFound {
			s.notFound.Add(1)
		}
	case EventMiss:
		s.misses.Add(1)
		d = hotkeys.Counts{Reads: 1, Misses: 1}
		if e.NotFound {
			s.notFound.Add(1)
		}
	case EventComputeStart:
		s.computes.Add(1)
		d.Computes = 1
		if e.Refresh {
			s.refreshes.Add(1)
		}
	case EventComputeEnd:
		if e.Err != nil && !e.NotFound && !errors.Is(e.Err, ErrClosed) {
			s.computeErrors.Add(1)
		}
	case EventWaitStart:
		s.waits.Add(1)
		d.Waits = 1
	case EventWaitEnd:
		if e.Wake == WakeFailed && !e.NotFound {
			s.remoteErrors.Add(1)
		}
	}
	if d != (hotkeys.Counts{}) {
		c.hot.AddEach(e.Key, e.Keys, d) // a FetchMany compute: one for each key
	}
	return n
}

// observe hands e to the observer, if any (see WithObserver).
func (c *core[T]) observe(ctx context.Context, e Event) context.Context {
	if c.opts.observer == nil {
		return ctx
	}
	e.Prefix = c.opts.prefix
	if r := c.opts.observer(ctx, e); r != nil {
		return r
	}
	return ctx
}

// log logs a rare event (see WithLogger).
func (c *core[T]) log(ctx context.Context, level slog.Level, msg, key string, attrs ...slog.Attr) {
	if c.opts.logger == nil {
		return
	}
	attrs = append(attrs, slog.String("prefix", c.opts.prefix), slog.String("key", key))
	c.opts.logger.LogAttrs(ctx, level, msg, attrs...)
}

// count reports a caller's answer: a hit, stale or not, or a miss; either
// may be "not found".
func (c *core[T]) count(ctx context.Context, key string, r outcome, notFound bool) {
	if r.hit {
		c.emitRead(ctx, Event{Kind: EventHit, Key: key, Stale: r.stale, NotFound: notFound}, r.b, r.stale, false)
	} else {
		c.emit(ctx, Event{Kind: EventMiss, Key: key, NotFound: notFound})
	}
}

// errNotFound is the error of a key whose answer is a not-found tombstone.
func errNotFound(key string) error { return fmt.Errorf("%w: %q", ErrNotFound, key) }

// newTurns bounds the lock attempts (fetch and refresh scripts) a Cache
// sends at once to half its client's connection pool, so that a store,
// which wakes every waiting process, never queues behind them (see
// docs/design.md, "Many keys at once").
func newTurns(client redis.UniversalClient) *semaphore.Weighted {
	size := 10 * runtime.GOMAXPROCS(0) // go-redis's default for a Client
	switch c := client.(type) {
	case *redis.Client:
		size = c.Options().PoolSize
	case *redis.ClusterClient:
		size = c.Options().PoolSize
	case *redis.Ring:
		size = c.Options().PoolSize
	}
	return semaphore.NewWeighted(int64(max(1, size/2)))
}
