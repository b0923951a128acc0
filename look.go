package dogpile

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// How a Fetch looks for a key first. A GET is what a hit needs; a miss then
// sends the lock script (fetchScript, GET-or-lock), so its compute starts
// two round trips after the call. The lock script alone returns a value that
// is there as a GET would, so looking with it costs a hit the same one round
// trip (and the server a script's run, many times a GET's: bench/HISTORY.md,
// "Figures moved out of code comments"), and starts a miss's compute one
// round trip sooner.
//
// So a Cache looks with a GET while most of its first looks hit, and with
// the lock script while most miss: a cold start, a Redis that was flushed
// or failed over, keys read once. A new Cache starts with GETs: most
// processes start against a warm Redis. Only a Cache without freshness
// options or a near tier looks with the script: their hits need the
// value's TTL, or a tracked read, which the script does not give.
//
// While it looks with the script, a hit is a lock attempt as a miss is:
// it takes a turn among the Cache's lock attempts (see turns), and goes
// through the circuit breaker as a GET does. Like the GET, the look is
// sent by the first caller, on its own context, from its own goroutine:
// a hit needs no other goroutine, and a miss's lock attempt leaves at
// once, not after a goroutine started for the flight was scheduled (in a
// herd of callers woken together, that one waited behind the herd; see
// bench/HISTORY.md, "Figures moved out of code comments").

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

// lookWithScript is Fetch's first look with the lock script, for the
// flight j that the caller leads. A value that decodes is a hit, answered
// here. Any other reply (the lock, now ours; a holder to wait for; a
// holder's failure) goes on in the flight's miss (see startFlight), which
// starts from it; bytes that do not decode, as after a GET, in a miss
// whose first try passes over them.
func (c *Cache[T]) lookWithScript(ctx context.Context, j *job[T]) (v T, err error, retry bool) {
	m := c.newMiss(j.key, j.ks, "", false)
	m.look = true
	res, err := m.try(ctx)
	if err != nil {
		return c.lookFailed(ctx, j, m, err)
	}
	if kind, _ := at[int64](res, 0); kind == replyValue {
		s, _ := at[string](res, 1)
		b := []byte(s)
		v, meta, derr := c.decodeEntry(b)
		if derr == nil {
			m.close()
			c.looks.saw(true)
			r := outcome{b: b, hit: true}
			c.flights.end(j.flight, j.cl, r)
			c.count(ctx, j.key, r, meta.notFound)
			if meta.notFound {
				return v, notFound(j.key), false
			}
			return v, nil, false
		}
		c.decodeError(ctx, j.key, derr)
		m.bad, res = sha1hex(b), nil
	}
	m.first, j.m = res, m
	c.startFlight(ctx, j, true)
	return c.await(ctx, j.key, j.flight, j.cl)
}

// lookFailed ends the flight j whose first look, with the lock script,
// got no reply, as a failed GET would: its callers start over if the
// first caller's ctx ended, else they get the error, unless Redis is
// unreachable and WithComputeWhenDown is set. A lock the script may have
// taken is released first; callers that start over wait for that release
// (the Cache's background work, see Close), or the look one of them leads
// would find this one's lock and wait for it as for another process's
// compute.
func (c *Cache[T]) lookFailed(ctx context.Context, j *job[T], m *miss[T], err error) (v T, _ error, retry bool) {
	m.close()
	mayHold := redisutil.MayHaveRun(err)
	release := releaseCall(m.ks, m.token, c.publish)
	if ctx.Err() != nil {
		if !mayHold || !c.life.goBackground(func() {
			rctx, cancel := redisutil.Detached(ctx)
			defer cancel()
			c.runPipelined(rctx, []scriptCall{release})
			c.flights.end(j.flight, j.cl, outcome{err: errRetry})
		}) {
			if mayHold {
				c.rollback(ctx, release) // closed: as other undos
			}
			c.flights.end(j.flight, j.cl, outcome{err: errRetry})
		}
		return v, ctx.Err(), false
	}
	if mayHold {
		c.rollback(ctx, release)
	}
	if c.opts.computeIfDown && unreachable(err) {
		j.down = true
		c.startFlight(ctx, j, true)
		return c.await(ctx, j.key, j.flight, j.cl)
	}
	err = fmt.Errorf("dogpile: fetch %q: %w", j.key, err)
	c.flights.end(j.flight, j.cl, outcome{err: err})
	return v, err, false
}
