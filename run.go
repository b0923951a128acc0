package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/semaphore"
)

// startFlight runs the miss path of j in its own goroutine, on a context
// detached from the leader's, so that the leader may leave on its own ctx
// like the other callers (see Fetch).
//
// A leader whose ctx can never end (no Done channel: Background, TODO,
// WithoutCancel) runs it in the calling goroutine instead, if here is true:
// it waits for the flight's end whatever happens, so a goroutine to leave
// it behind would buy it nothing, and the hand-off costs a cold miss a
// thread's wake-up (about a tenth of its time to compute, see
// bench/README.md). The other callers still join and leave as they
// like. Callers that start several flights at once pass false.
func (c *core[T]) startFlight(ctx context.Context, j *job[T], here bool) {
	here = here && ctx.Done() == nil
	base, stop := c.life.Detach(ctx)
	var wctx context.Context
	var cancel context.CancelFunc
	if c.opts.waitTimeout > 0 {
		wctx, cancel = context.WithTimeout(base, c.opts.waitTimeout)
	} else {
		wctx, cancel = context.WithCancel(base)
	}
	c.flights.Detach(j.cl, cancel)
	started := c.life.Run(here, func() {
		defer stop()
		defer cancel()
		r := c.runMiss(base, wctx, j)
		if r.err != nil && c.life.Done() {
			r = outcome{err: ErrClosed} // whatever the cancellation made of it
		}
		c.flights.End(j.flight, j.cl, r)
	})
	if !started {
		cancel()
		stop()
		if j.m != nil {
			j.m.abandon(ctx)
		}
		c.flights.End(j.flight, j.cl, outcome{err: ErrClosed})
	}
}

// await waits for the flight cl of key (flight is its name in the group),
// or for ctx.
func (c *core[T]) await(ctx context.Context, key string, flight flightID, cl *call) (v T, err error, retry bool) {
	select {
	case <-cl.Done():
	case <-ctx.Done():
		c.flights.Leave(flight, cl)
		c.emit(ctx, Event{Kind: EventMiss, Key: key})
		// The flight's round trip may be what held the caller up, on a
		// server that stopped answering: the breaker asks the server (see
		// ErrUnavailable), which costs a PING if it was only slow.
		c.breaker.Observe(ctx.Err())
		return v, ctx.Err(), false
	}
	if cl.Result.err == errRetry {
		return v, nil, true
	}
	if cl.Result.b == nil {
		c.count(ctx, key, cl.Result, errors.Is(cl.Result.err, ErrNotFound))
		if u, ok := cl.Result.v.(T); ok {
			v = u // computed but not stored: it did not encode
		}
		return v, cl.Result.err, false
	}
	growStack(0) // before the codec's deep frames (see growStack)
	v, m, derr := c.decodeEntry(cl.Result.b)
	c.count(ctx, key, cl.Result, m.NotFound)
	switch {
	case derr != nil: // cannot happen: the flight decoded b already
		return v, fmt.Errorf("dogpile: decode %q: %w", key, derr), false
	case m.NotFound && errors.Is(cl.Result.err, ErrNotFound):
		return v, cl.Result.err, false // compute's own error, in the process that computed
	case m.NotFound:
		return v, notFound(key), false
	}
	return v, cl.Result.err, false
}

// runMiss is the miss path of one process for one key: it looks across the
// fleet (see fleetMiss) and computes when it wins the lock, or, when Redis
// is unreachable and WithComputeWhenDown is set, computes without it. ctx
// is detached from the callers; wctx also ends when every caller left or
// the wait timeout passed.
func (c *core[T]) runMiss(ctx, wctx context.Context, j *job[T]) (r outcome) {
	defer func() {
		if p := recover(); p != nil { // a bug here must not crash the caller's process
			r = outcome{err: fmt.Errorf("dogpile: fetch %q: internal panic: %v\n%s", j.key, p, debug.Stack())}
		}
	}()
	if !j.down {
		if r, down := c.fleetMiss(ctx, wctx, j); !down {
			return r
		}
	}
	return c.computeLocal(ctx, j)
}

// fleetMiss looks for j's value across the fleet (see miss) until it has
// it, or holds the lock and computed it; down reports that Redis is
// unreachable and WithComputeWhenDown is set.
func (c *core[T]) fleetMiss(ctx, wctx context.Context, j *job[T]) (r outcome, down bool) {
	m := j.m
	if m == nil {
		m = c.newMiss(j.key, j.ks, j.bad, j.force)
		m.first = j.first
	}
	defer m.close()
	for {
		end, b, err := m.resolve(ctx, wctx)
		switch {
		case err != nil || end == missValue:
			return outcome{b: b, err: err}, false
		case end == missDown:
			return outcome{}, true
		}
		if m.takeover() {
			c.stats.takeovers.Add(1)
			c.log(ctx, slog.LevelWarn, "dogpile: took over the compute of a holder that vanished", j.key)
		}
		if m.prev != nil {
			j.prev = m.prev
		}
		r, again := c.computeHeld(ctx, j, m.token, m.sent)
		if !again {
			return r, false
		}
		// Our lease was lost while compute ran (the key was Set or Deleted,
		// or Redis was unreachable for a lease) and compute gave up, or a
		// Refresh's store was refused: look again, as a newcomer.
		m.restart()
	}
}

// lookWithScript is Fetch's first look with the lock script, for the
// flight j that the caller leads. A value that decodes is a hit, answered
// here. Any other reply (the lock, now ours; a holder to wait for; a
// holder's failure) goes on in the flight's miss (see startFlight), which
// starts from it; bytes that do not decode, as after a GET, in a miss
// whose first try passes over them.
func (c *core[T]) lookWithScript(ctx context.Context, j *job[T]) (v T, err error, retry bool) {
	m := c.newMiss(j.key, j.ks, "", false)
	m.look = true
	res, err := m.try(ctx)
	if err != nil {
		return c.lookFailed(ctx, j, m, err)
	}
	if kind, _ := script.At[int64](res, 0); kind == script.Value {
		s, _ := script.At[string](res, 1)
		b := []byte(s)
		v, meta, derr := c.decodeEntry(b)
		if derr == nil {
			m.close()
			c.looks.saw(true)
			r := outcome{b: b, hit: true}
			c.flights.End(j.flight, j.cl, r)
			c.count(ctx, j.key, r, meta.NotFound)
			if meta.NotFound {
				return v, notFound(j.key), false
			}
			return v, nil, false
		}
		c.decodeError(ctx, j.key, derr)
		m.bad, res = entry.SHA1(b), nil
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
func (c *core[T]) lookFailed(ctx context.Context, j *job[T], m *miss[T], err error) (v T, _ error, retry bool) {
	m.close()
	mayHold := redisutil.MayHaveRun(err)
	release := releaseCall(m.ks, m.token, c.publish)
	if ctx.Err() != nil {
		if !mayHold || !c.life.Go(func() {
			rctx, cancel := redisutil.Detached(ctx)
			defer cancel()
			redisutil.RunScripts(rctx, c.client, []scriptCall{release})
			c.flights.End(j.flight, j.cl, outcome{err: errRetry})
		}) {
			if mayHold {
				c.rollback(ctx, release) // closed: as other undos
			}
			c.flights.End(j.flight, j.cl, outcome{err: errRetry})
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
	c.flights.End(j.flight, j.cl, outcome{err: err})
	return v, err, false
}

// endIfPanic, deferred by a flight's leader, ends the flight cl (named
// id) if the leader is panicking (in a client hook, say) before it handed
// the flight to a goroutine of its own, and panics on: a program that
// recovers (net/http does) must not find the key's later callers joining a
// flight nobody ends.
func (c *core[T]) endIfPanic(id flightID, cl *call) {
	if p := recover(); p != nil {
		c.flights.EndUnlessDetached(id, cl, outcome{err: fmt.Errorf("dogpile: panic in the first look: %v", p)})
		panic(p)
	}
}

// growStack makes room on the calling goroutine's stack for a decode, in one
// copy made while few frames are on it. A caller that waited for a flight is
// often a goroutine started for this request, whose stack begins at 2 KiB; a
// codec's decode (msgpack's reflection) needs more, and the runtime grows a
// stack by copying it and fixing up every frame on it, which deep in the
// codec's frames was the dearest work a woken waiter did (bench/HISTORY.md,
// "Figures moved out of code comments"). A stack already this deep pays only
// the zeroing of the frame, once per waiting caller, never on a hit.
//
//go:noinline
func growStack(i int) byte {
	var frame [waiterFrame]byte
	frame[i] = 1 // i is 0: a frame the compiler cannot drop
	return frame[len(frame)-1-i]
}

// waiterFrame is growStack's frame: with the frames of Fetch and a shallow
// caller below it, a stack of 2 or 4 KiB becomes 8 KiB, which msgpack's
// decode of a struct fits in (16 KiB under callers over about 3 KiB deep).
const waiterFrame = 4 << 10

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
