package dogpile

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"

	"github.com/dogpile-go/dogpile/internal/breaker"
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
