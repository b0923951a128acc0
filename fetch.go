package dogpile

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/wake"
	"github.com/redis/go-redis/v9"
)

// Fetch returns the value cached under key. On a miss it calls compute,
// stores the result for ttl and returns it. Concurrent misses for key, in
// this process or in any process that shares the Redis server, call
// compute once; the other callers wait for the stored value and are woken
// by Redis the moment it is stored.
//
// A hit costs one round trip (a GET). Concurrent Fetch calls for one key in
// one process share a single flight: one GET, and on a miss one lock
// attempt and one compute or one wait. Every caller receives its own copy
// of the value, decoded from the stored bytes.
//
// compute runs on a context detached from the caller's (it keeps the
// caller's values, not its cancellation): callers that give up must not
// fail the others, who still want the value, nor leave other processes
// waiting for a compute that was abandoned. That context is cancelled only
// when this process loses the compute lock (it could not renew the lease,
// or the key was Set or Deleted meanwhile); compute should bound its own
// work otherwise. If ctx is done first, Fetch returns ctx.Err() at once;
// the one exception is the first caller's GET, which runs on its own ctx in
// its own goroutine (no extra goroutine on the hit path), so its deadline
// bounds the round trip only if the client was created with
// redis.Options.ContextTimeoutEnabled (else go-redis's read timeout does).
//
// When compute returns an error or panics, nothing is stored and the lock
// is released at once. Callers in this process receive compute's error
// (a panic becomes an error). Callers in other processes that were waiting
// for this compute receive an error matching [ErrComputeFailed]; they do
// not retry the compute themselves (the next Fetch does), so a failing
// backend is called once per failure, not once per waiting process.
//
// Stored bytes that do not decode count as a miss: they are recomputed and
// overwritten (see [Stats].DecodeErrors). Redis errors are returned wrapped,
// and compute is not called, unless [WithComputeWhenDown] is set. If
// compute succeeded but storing its result failed, Fetch returns the value
// together with the error.
//
// Fetch panics if key is empty, ttl is below a millisecond or compute is
// nil.
func (c *Cache[T]) Fetch(ctx context.Context, key string, ttl time.Duration, compute func(ctx context.Context) (T, error)) (T, error) {
	if compute == nil {
		panic("dogpile: nil compute")
	}
	checkTTL(ttl)
	vk := c.valueKey(key)
	for {
		v, err, retry := c.fetch(ctx, key, vk, ttl, compute)
		if !retry {
			return v, err
		}
	}
}

// errRetry ends a flight whose first caller gave up during the GET: the
// callers that joined it start over (one of them leads the next flight).
var errRetry = errors.New("dogpile: retry")

// errComputeTooLong is the cause that ends compute's context after the
// bound set by WithMaxCompute.
var errComputeTooLong = errors.New("dogpile: compute ran past its limit")

// errLeaseLost is the cancellation cause of compute's context when the
// compute lock was lost.
var errLeaseLost = errors.New("dogpile: compute lock lost")

// A call is one flight: the work for one key shared by the concurrent
// Fetch calls of one process.
type call struct {
	b   []byte // encoded value, if any; set before done is closed
	err error
	hit bool // found by the first GET

	// Guarded by group.mu.
	done   chan struct{}      // made once a caller must wait; closed by finish
	refs   int                // callers waiting for done
	busy   bool               // computing: runs on even if every caller leaves
	cancel context.CancelFunc // ends the wait of a flight nobody waits for
}

type group struct {
	mu sync.Mutex
	m  map[string]*call
}

// fetch makes one attempt; retry reports that the flight it joined was
// abandoned by its first caller, and the caller should start over.
func (c *Cache[T]) fetch(ctx context.Context, key, vk string, ttl time.Duration, compute func(context.Context) (T, error)) (v T, err error, retry bool) {
	g := &c.flights
	g.mu.Lock()
	if cl := g.m[key]; cl != nil {
		// A flight in the map has not ended (finish removes it first, under
		// g.mu), so a done made here is closed by that finish.
		if cl.done == nil {
			cl.done = make(chan struct{})
		}
		cl.refs++
		g.mu.Unlock()
		c.stats.shared.Add(1)
		return c.await(ctx, key, cl)
	}
	// No done channel yet: a hit with no company, the common case, never
	// needs one.
	cl := &call{refs: 1}
	g.m[key] = cl
	g.mu.Unlock()

	// The hit path: one GET, run by the first caller on its own context
	// (its deadline applies to its own round trip). Only the value key is
	// built here; the other names are derived on a miss.
	b, err := c.client.Get(ctx, vk).Bytes()
	var bad string // SHA1 of stored bytes that did not decode
	down := false
	switch {
	case err == nil:
		v, derr := c.decode(b)
		if derr == nil {
			c.finishHit(key, cl, b)
			c.stats.hits.Add(1)
			return v, nil, false
		}
		c.stats.decodeErrors.Add(1)
		bad = sha1hex(b)
	case err == redis.Nil:
	case ctx.Err() != nil:
		c.finish(key, cl, nil, errRetry)
		return v, ctx.Err(), false
	case c.opts.computeIfDown && unreachable(err):
		down = true
	default:
		err = redisErr(ctx, "get", key, err)
		c.finish(key, cl, nil, err)
		return v, err, false
	}

	// A miss. The rest runs in its own goroutine, on a context detached
	// from this caller's, so that it may leave on its own ctx like the
	// others (see Fetch).
	base := context.WithoutCancel(ctx)
	var wctx context.Context
	var cancel context.CancelFunc
	if c.opts.waitTimeout > 0 {
		wctx, cancel = context.WithTimeout(base, c.opts.waitTimeout)
	} else {
		wctx, cancel = context.WithCancel(base)
	}
	ks := keysFor(vk)
	g.mu.Lock()
	cl.cancel = cancel
	if cl.done == nil {
		cl.done = make(chan struct{})
	}
	g.mu.Unlock()
	go func() {
		defer cancel()
		b, err := c.flight(base, wctx, key, ks, ttl, compute, cl, bad, down)
		c.finish(key, cl, b, err)
	}()
	return c.await(ctx, key, cl)
}

// await waits for the flight cl, or for ctx.
func (c *Cache[T]) await(ctx context.Context, key string, cl *call) (v T, err error, retry bool) {
	select {
	case <-cl.done:
	case <-ctx.Done():
		c.leave(key, cl)
		c.stats.misses.Add(1)
		return v, ctx.Err(), false
	}
	if cl.err == errRetry {
		return v, nil, true
	}
	if cl.hit {
		c.stats.hits.Add(1)
	} else {
		c.stats.misses.Add(1)
	}
	if cl.b == nil {
		return v, cl.err, false
	}
	v, derr := c.decode(cl.b)
	if derr != nil { // cannot happen: the flight decoded b already
		return v, fmt.Errorf("dogpile: decode %q: %w", key, derr), false
	}
	return v, cl.err, false
}

// leave records that a caller of cl gave up. A flight that nobody waits for
// any more stops waiting for other processes; one that is computing runs
// on, since other processes may be waiting for its result.
func (c *Cache[T]) leave(key string, cl *call) {
	g := &c.flights
	g.mu.Lock()
	defer g.mu.Unlock()
	cl.refs--
	if cl.refs == 0 && !cl.busy && cl.cancel != nil {
		cl.cancel()
		if g.m[key] == cl {
			delete(g.m, key) // later callers start a fresh flight
		}
	}
}

// finish ends the flight cl with b and err and wakes its waiting callers.
func (c *Cache[T]) finish(key string, cl *call, b []byte, err error) {
	c.end(key, cl, b, err, false)
}

// finishHit ends the flight cl with the value b found by its first GET.
func (c *Cache[T]) finishHit(key string, cl *call, b []byte) {
	c.end(key, cl, b, nil, true)
}

func (c *Cache[T]) end(key string, cl *call, b []byte, err error, hit bool) {
	g := &c.flights
	g.mu.Lock()
	if g.m[key] == cl {
		delete(g.m, key)
	}
	// Set under g.mu: a caller that joined has made done and reads the
	// fields after it is closed; one that left early never reads them.
	cl.b, cl.err, cl.hit = b, err, hit
	if cl.done != nil {
		close(cl.done)
	}
	g.mu.Unlock()
}

// pushWaitCap bounds one wait for a push wake-up, so that a lost message
// costs at most this much latency even when the holder's lease is long.
const pushWaitCap = 2 * time.Second

// flight is the miss path of one process for one key. ctx is detached from
// the callers; wctx also ends when every caller left or the wait timeout
// passed. bad is the SHA1 of stored bytes that did not decode.
func (c *Cache[T]) flight(ctx, wctx context.Context, key string, ks keys, ttl time.Duration, compute func(context.Context) (T, error), cl *call, bad string, down bool) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil { // a bug here must not crash the caller's process
			b, err = nil, fmt.Errorf("dogpile: fetch %q: internal panic: %v\n%s", key, r, debug.Stack())
		}
	}()
	if down {
		return c.computeLocal(ctx, key, compute, cl)
	}
	// Subscribe only once the fetch script says another process computes:
	// the winner, whose compute the whole fleet waits for, must not spend a
	// round trip on a subscription first. A waiter then runs the script once
	// more after subscribing (a value stored in between would otherwise be
	// missed), so it costs three commands (GET, script, script; the value
	// comes with the wake-up, see storedBy). On error, fall back to polling
	// within the holder's lease.
	var sub *wake.Sub
	subscribed := false
	defer func() { sub.Close() }()

	token := redisutil.Token()
	seen := "" // the holder we wait for
	waited := false
	backoff := 5 * time.Millisecond
	t := time.NewTimer(time.Hour) // Reset below; since Go 1.23 Reset drops a stale tick
	defer t.Stop()
	for {
		sent := time.Now()
		res, err := fetchScript.Run(wctx, c.client, []string{ks.value, ks.lock, ks.errs},
			token, redisutil.Millis(c.opts.lease), seen, bad).Slice()
		if err != nil {
			// The script may have run even though we saw no reply (a
			// timeout, a cancelled wait, a broken connection): undo a lock
			// it may have taken, so no process waits a lease for nothing.
			if !redisutil.NeverSent(err) {
				c.release(ctx, ks, token)
			}
			if wctx.Err() != nil {
				return nil, waitErr(wctx, key)
			}
			if c.opts.computeIfDown && unreachable(err) {
				return c.computeLocal(ctx, key, compute, cl)
			}
			return nil, fmt.Errorf("dogpile: fetch %q: %w", key, err)
		}
		switch kind, _ := at[int64](res, 0); kind {
		case 0: // the value is there
			s, _ := at[string](res, 1)
			if _, derr := c.decode([]byte(s)); derr != nil {
				c.stats.decodeErrors.Add(1)
				bad = sha1hex([]byte(s))
				continue
			}
			return []byte(s), nil
		case 1: // we hold the compute lock
			// The script found no value in the same atomic step that took
			// the lock, so there is nothing to re-check: another process
			// that stored the value between our GET and now was seen above.
			sub.Close()
			sub = nil
			if seen != "" {
				c.stats.takeovers.Add(1)
			}
			b, err, again := c.computeHeld(ctx, key, ks, ttl, compute, cl, token, sent)
			if !again {
				return b, err
			}
			// Our lease was lost while compute ran (the key was Set or
			// Deleted, or Redis was unreachable for a lease) and compute
			// gave up: look again, as a newcomer.
			token, seen, bad = redisutil.Token(), "", ""
			subscribed = false
		case 2: // another holder computes: wait for its message
			seen, _ = at[string](res, 1)
			pttl, _ := at[int64](res, 2)
			if !subscribed {
				subscribed = true
				var serr error
				if sub, serr = wake.Subscribe(wctx, c.client, ks.channel); serr != nil && wctx.Err() != nil {
					return nil, waitErr(wctx, key)
				}
				continue // look again, now that no store can go unnoticed
			}
			if !waited {
				waited = true
				c.stats.waits.Add(1)
				if c.onWait != nil {
					c.onWait(key)
				}
			}
			// Each wait is bounded by the holder's remaining lease: a lost
			// message, or a holder that died, costs at most that long.
			d := redisutil.Wait(pttl, pushWaitCap)
			if sub != nil {
				d = min(d, pushWaitCap) + rand.N(time.Millisecond)
			} else {
				d = min(d, backoff)
				backoff = min(2*backoff, 200*time.Millisecond)
			}
			t.Reset(d)
			select {
			case <-wctx.Done():
				return nil, waitErr(wctx, key)
			case <-sub.Wake():
				c.stats.push.Add(1)
				if b, ok := c.storedBy(seen, sub.Payload()); ok {
					return b, nil
				}
			case <-t.C:
				c.stats.poll.Add(1)
			}
		case 3: // the compute we waited for failed
			text, _ := at[string](res, 1)
			c.stats.remoteErrors.Add(1)
			return nil, fmt.Errorf("%w: %q: %s", ErrComputeFailed, key, text)
		default:
			return nil, fmt.Errorf("dogpile: fetch %q: unexpected script reply %v", key, res)
		}
	}
}

// maxWakeValue is the longest encoded value that the store script sends
// along with its wake-up. Longer values are read again by each waiting
// process (one more round trip), rather than pushed through every
// subscriber's connection and kept in each Sub.
const maxWakeValue = 64 << 10

// storedBy returns the value carried by a wake-up payload (see storeScript)
// if the compute that stored it is the one of holder, the token that the
// last fetch script saw holding the lock, and the value decodes.
//
// Why the token must match: a payload is the value exactly as the holder
// stored it, in the same atomic step that checked the holder still held
// the lock (a fenced store, so never a value computed under a lock that a
// Set, a Delete or a takeover had taken away). Holder's store ran after our
// fetch script saw holder holding the lock and no value, which was after
// this flight began: the value is then at least as fresh as a GET made
// when the wake-up was sent, i.e. what re-reading would have returned at
// that moment. A payload of any other compute has no such order with
// respect to our observation: a message published before our subscription
// was in place (the hub shares one connection, and a Sub joining a
// channel that another Cache of this process already listens to may be
// handed a message that was in flight), or by the holder of an earlier
// lock, may carry a value that a Delete since removed or a Set since
// replaced. Those, a plain "v", a payload that does not decode, and every
// other wake-up fall back to reading Redis again (the fetch script), as
// does a payload replaced by a later message (Set, Delete) before we read
// it: Payload keeps the latest.
func (c *Cache[T]) storedBy(holder, payload string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(payload, "v")
	if !ok || holder == "" {
		return nil, false
	}
	token, value, ok := strings.Cut(rest, ":")
	if !ok || token != holder {
		return nil, false
	}
	b := []byte(value)
	if _, err := c.decode(b); err != nil {
		return nil, false
	}
	return b, true
}

// computeHeld runs compute while holding the lock with token, acquired by
// a request sent at sent, and stores the result. again reports that the
// lease was lost and compute failed: the caller should start over.
func (c *Cache[T]) computeHeld(ctx context.Context, key string, ks keys, ttl time.Duration, compute func(context.Context) (T, error), cl *call, token string, sent time.Time) (b []byte, err error, again bool) {
	c.setBusy(cl)
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if c.opts.maxCompute > 0 {
		var tcancel context.CancelFunc
		cctx, tcancel = context.WithTimeoutCause(cctx, c.opts.maxCompute, errComputeTooLong)
		defer tcancel()
	}
	r := c.renew(ctx, ks, token, sent, cancel)
	v, cerr := c.runCompute(cctx, compute)
	lost := r.end()

	dctx, dcancel := context.WithTimeout(ctx, cleanupTimeout)
	defer dcancel()
	if cerr == nil {
		b, cerr = c.encode(v)
		if cerr != nil {
			cerr = fmt.Errorf("dogpile: encode %q: %w", key, cerr)
		}
	}
	if cerr != nil {
		if lost && errors.Is(context.Cause(cctx), errLeaseLost) {
			c.release(ctx, ks, token)
			return nil, nil, true
		}
		// Tell the waiting processes, and let the next Fetch try again.
		_ = failScript.Run(dctx, c.client, []string{ks.lock, ks.errs, ks.channel},
			token, errText(cerr), redisutil.Millis(c.opts.lease+time.Second), c.publish).Err()
		return nil, cerr, false
	}
	// The write is fenced: it happens only if the lock still holds our
	// token. A holder that lost its lock (it was paused past its lease and
	// another process took over, or the key was Set or Deleted) must not
	// overwrite what is newer; its callers still get the value it computed.
	err = storeScript.Run(dctx, c.client, []string{ks.value, ks.lock, ks.channel},
		token, b, redisutil.Millis(ttl), c.publish, maxWakeValue).Err()
	if err != nil {
		if c.opts.computeIfDown && unreachable(err) {
			return b, nil, false
		}
		c.release(ctx, ks, token)
		return b, fmt.Errorf("dogpile: store %q: %w", key, err), false
	}
	return b, nil, false
}

// computeLocal runs compute without the cache, when Redis is unreachable
// and WithComputeWhenDown is set.
func (c *Cache[T]) computeLocal(ctx context.Context, key string, compute func(context.Context) (T, error), cl *call) ([]byte, error) {
	c.setBusy(cl)
	v, err := c.runCompute(ctx, compute)
	if err != nil {
		return nil, err
	}
	b, err := c.encode(v)
	if err != nil {
		return nil, fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	return b, nil
}

func (c *Cache[T]) setBusy(cl *call) {
	c.flights.mu.Lock()
	cl.busy = true
	c.flights.mu.Unlock()
}

// runCompute calls compute, turning a panic into an error.
func (c *Cache[T]) runCompute(ctx context.Context, compute func(context.Context) (T, error)) (v T, err error) {
	c.stats.computes.Add(1)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dogpile: compute panicked: %v\n%s", r, debug.Stack())
		}
		if err != nil {
			c.stats.computeErrors.Add(1)
		}
	}()
	return compute(ctx)
}

// cleanupTimeout bounds a release or store that runs after the callers may
// have left.
const cleanupTimeout = 3 * time.Second

// release gives up the lock if it still holds token, and wakes waiters.
func (c *Cache[T]) release(ctx context.Context, ks keys, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = releaseScript.Run(ctx, c.client, []string{ks.lock, ks.channel}, token, c.publish).Err()
}

// A renewal extends the compute lock's lease every third of the lease
// while compute runs.
type renewal struct {
	stop, done chan struct{}
	lost       atomic.Bool
}

// renew starts renewing the lease acquired by a request sent at sent. If an
// extension is refused, or none is confirmed before the lease may have run
// out in Redis, the lease is lost and cancel is called with errLeaseLost.
func (c *Cache[T]) renew(ctx context.Context, ks keys, token string, sent time.Time, cancel context.CancelCauseFunc) *renewal {
	r := &renewal{stop: make(chan struct{}), done: make(chan struct{})}
	lease := c.opts.lease
	// From the holder's point of view the lease is safe only until
	// sent+lease-drift, whatever Redis said: the reply may have been slow.
	drift := lease/100 + 2*time.Millisecond
	interval := lease / 3
	go func() {
		defer close(r.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		deadline := time.NewTimer(time.Until(sent.Add(lease - drift)))
		defer deadline.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-deadline.C:
				r.lost.Store(true)
				cancel(errLeaseLost)
				return
			case <-tick.C:
			}
			s := time.Now()
			if limit := c.opts.maxCompute; limit > 0 && s.Sub(sent) >= limit {
				continue // let the lease run out: another process takes over
			}
			rctx, rcancel := context.WithTimeout(ctx, interval)
			n, err := extendScript.Run(rctx, c.client, []string{ks.lock}, token, redisutil.Millis(lease)).Int64()
			rcancel()
			switch {
			case err != nil: // try again at the next tick, within the deadline
			case n == 0:
				r.lost.Store(true)
				cancel(errLeaseLost)
				return
			default:
				deadline.Reset(time.Until(s.Add(lease - drift)))
			}
		}
	}()
	return r
}

// end stops the renewal and reports whether the lease was lost.
func (r *renewal) end() bool {
	close(r.stop)
	<-r.done
	return r.lost.Load()
}

// waitErr is the error of a flight whose wait context ended: the wait
// timeout (see WithWaitTimeout), or every caller left.
func waitErr(wctx context.Context, key string) error {
	if errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("dogpile: wait for %q: %w", key, context.DeadlineExceeded)
	}
	return wctx.Err()
}

// errText is the text of a failed compute that waiting processes receive,
// cut to a size that is reasonable to keep in Redis.
func errText(err error) string {
	const maxLen = 512
	s := err.Error()
	if len(s) > maxLen {
		s = s[:maxLen]
	}
	return s
}

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool {
	var re redis.Error
	return !errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed)
}

func sha1hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

// at returns res[i] as an E, or false.
func at[E any](res []any, i int) (E, bool) {
	var zero E
	if i >= len(res) {
		return zero, false
	}
	e, ok := res[i].(E)
	return e, ok
}
