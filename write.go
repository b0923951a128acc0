package dogpile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// Writes to Redis besides a read: through the client's circuit breaker
// (guard), scripts as redisutil sends them (EVALSHA, then EVAL on
// NOSCRIPT), alone or together in one pipeline (go-redis splits a
// pipeline per node, so a cluster costs one round trip per node, sent in
// parallel), with keys grouped by what one script may touch together:
// Set's write, how a compute ends (settle: its store, release or failure),
// and the rollback of a write whose reply was lost. The keys and tags they
// touch are internal/keyspace's.

// A scriptCall is one script run; a pipeline of them is sent by
// redisutil.RunScripts.
type scriptCall = redisutil.Call

// maxGroup bounds the keys of one script call (and one MGET), so that a
// huge batch does not block the server in one long script.
const maxGroup = 256

// guard runs f, the first round trip of a call, through the client's
// circuit breaker (see ErrUnavailable): while Redis is known to be
// unreachable it returns ErrUnavailable without calling f.
func (c *core[T]) guard(ctx context.Context, f func() error) error {
	done, err := c.allow(ctx)
	if err != nil {
		return err
	}
	err = f()
	c.report(done, err)
	return err
}

// turnedAway returns the error of a call that would wait for a flight
// while the client's circuit is open: that flight needs Redis (unless it
// computes without it, WithComputeWhenDown), and it may hang on a server
// that stopped answering until its read times out, so the caller fails
// at once, as one that reads would.
func (c *core[T]) turnedAway() error {
	if c.opts.computeIfDown || !c.breaker.Open() {
		return nil
	}
	c.stats.unavailable.Add(1)
	return c.breaker.Err()
}

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }

// rollback undoes, in the background, requests of this process whose
// replies were lost (a lock attempt, a store) with undo, releases of the
// token they may have left holding a lock: the way the lock package undoes
// its lost acquires too (see redisutil.Rollback). ctx's end means that no
// caller waits any more.
func (c *core[T]) rollback(ctx context.Context, undo ...scriptCall) {
	redisutil.Rollback(ctx, func(ctx context.Context) { redisutil.RunScripts(ctx, c.client, undo) })
}

// release gives up the lock if it still holds token, and wakes waiters.
func (c *core[T]) release(ctx context.Context, ks keyspace.Keys, token string) {
	ctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	_ = releaseCall(ks, token, c.publish).Run(ctx, c.client).Err()
}

// releaseCall is the script call of release.
func releaseCall(ks keyspace.Keys, token, publish string) scriptCall {
	return scriptCall{Script: script.Release, Keys: []string{ks.Lock, ks.Channel}, Args: []any{token, publish}}
}

// storeCall is the script call of store.
func (c *core[T]) storeCall(ks keyspace.Keys, token string, b []byte, ttl time.Duration) scriptCall {
	return scriptCall{Script: script.Store, Keys: []string{ks.Value, ks.Lock, ks.Channel},
		Args: []any{token, b, redisutil.Millis(ttl), c.publish, maxWakeValue}}
}

// storeCallFor is the script call that stores b for ks under token, as
// store does, for a compute that said ro: a plain store; on one server,
// one that checks and adds the tags in the same step; with split, a plain
// store whose tags tagFirst must add before it (see keyspace.Space.TagFirst); or, when the cache cannot
// vouch for the tags (Tag could not read them), one that keeps nothing but
// hands the value to the waiters.
func (c *core[T]) storeCallFor(ks keyspace.Keys, token string, b []byte, ttl time.Duration, ro *resultOpts) (sc scriptCall, split bool) {
	tags, seen, vouch := ro.tagged()
	if len(tags) > 0 && !vouch {
		ttl = 0 // the value goes to the waiters, and is not kept
	}
	sc = c.storeCall(ks, token, b, ttl)
	switch {
	case len(tags) == 0 || ttl == 0:
		return sc, false
	case !c.oneNode():
		return sc, true
	}
	return c.space.StoreTagged(sc, tags, seen), false
}

// tagFirst adds the value keys vks, to be stored for ttls, to the sets of
// the tags compute gave them (ro), before their stores, and reports which
// an InvalidateTag has overtaken (see keyspace.Space.TagFirst).
func (c *core[T]) tagFirst(ctx context.Context, ro *resultOpts, vks []string, ttls []time.Duration) (overtaken []bool) {
	tags, seen, _ := ro.tagged()
	return c.space.TagFirst(ctx, tags, seen, vks, ttls)
}

// What a compute under the lock came to, for settle: its entry b (nil if
// err says why there is none: compute's error, or a value that did not
// encode) to store for ttl, compute's own value and error, and whether the
// lease was lost or the Cache closed while it ran.
type computed[T any] struct {
	b      []byte
	ttl    time.Duration
	err    error
	v      T
	cerr   error
	lost   bool
	closed bool
	ro     *resultOpts // what compute said of its result
}

// settle ends j's compute, run under the lock with token: it stores d's
// entry (see store) or, with none, releases the lock (the lease was lost,
// or the Cache closed: another process takes over at once) or tells the
// waiting processes of the failure (see fail). again reports that the
// caller should look again as a newcomer: the lease was lost and compute
// failed, or the store was refused.
func (c *core[T]) settle(ctx context.Context, j *job[T], token string, d computed[T]) (r outcome, again bool) {
	switch {
	case d.err != nil && d.lost:
		c.release(ctx, j.ks, token)
		return outcome{}, true
	case d.err != nil && d.closed:
		c.release(ctx, j.ks, token)
		return outcome{err: ErrClosed}, false
	case d.err != nil:
		if !c.fail(ctx, j, token, d.err) && j.force && errors.Is(d.err, ErrNotFound) {
			return outcome{}, true // as a refused store (see below): the old value may be left
		}
		return unstored(d.v, d.cerr, d.err), false
	}
	err := c.store(ctx, j, token, d.b, d.ttl, d.ro)
	if errors.Is(err, errRefused) {
		// A write, an invalidation or another holder took the lock: look
		// again rather than hand the value to callers that may have joined
		// after that write returned (in another process, or after an
		// InvalidateTag of a tag compute gave it). A Set's value is then
		// found; after a Delete or an invalidation the key is computed anew.
		return outcome{}, true
	}
	r = outcome{b: d.b, err: err}
	if errors.Is(d.cerr, ErrNotFound) { // a tombstone: this process answers with compute's own error
		r.err = errors.Join(d.cerr, r.err)
	}
	return r, false
}

// unstored is the outcome of a compute whose answer (v, or cerr) could not
// be stored for err: compute's own error, or v with an error naming why
// (it did not encode), as Fetch documents.
func unstored[T any](v T, cerr, err error) outcome {
	if cerr != nil {
		return outcome{err: err}
	}
	return outcome{v: v, err: err}
}

// store writes b, computed under the lock with token, for ttl (0: it hands
// b to the waiters without storing it) and wakes the waiters. The write is
// fenced: it happens only if the lock still holds our token. A holder that
// lost its lock (it was paused past its lease and another process took
// over, or the key was Set or Deleted) must not overwrite what is newer;
// its callers still get the value it computed.
//
// With tags (see Tag) the store is made as storeCallFor says.
func (c *core[T]) store(ctx context.Context, j *job[T], token string, b []byte, ttl time.Duration, ro *resultOpts) error {
	dctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	sc, split := c.storeCallFor(j.ks, token, b, ttl, ro)
	if split && c.tagFirst(dctx, ro, []string{j.ks.Value}, []time.Duration{ttl})[0] {
		rc := releaseCall(j.ks, token, c.publish) // the waiters look again
		_ = rc.Run(dctx, c.client).Err()
		return errRefused
	}
	n, err := sc.Run(dctx, c.client).Int64()
	if err == nil && n < 1 { // 0: the lock was not ours; -1: a tag was invalidated
		return errRefused
	}
	return c.stored(ctx, j, token, err)
}

// stored handles the outcome err of j's store: a failed store releases the
// lock, so that no process waits a lease for nothing.
func (c *core[T]) stored(ctx context.Context, j *job[T], token string, err error) error {
	if err == nil || c.opts.computeIfDown && unreachable(err) {
		return nil
	}
	c.rollback(ctx, releaseCall(j.ks, token, c.publish))
	return fmt.Errorf("dogpile: store %q: %w", j.key, err)
}

// fail releases the lock after compute failed with cerr and tells the
// waiting processes; the next Fetch tries again. With a freshness option,
// no process refreshes the key in the background for the retry interval. A
// value found not to exist any more is deleted rather than served stale.
// It reports false only if the lock was no longer ours: nothing was done.
func (c *core[T]) fail(ctx context.Context, j *job[T], token string, cerr error) (done bool) {
	dctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	sc := c.failCall(j.ks, token, cerr)
	n, err := sc.Run(dctx, c.client).Int64()
	return err != nil || n == 1 // only a refusal (the lock was lost) is not done
}

// failCall is the script call of fail.
func (c *core[T]) failCall(ks keyspace.Keys, token string, cerr error) scriptCall {
	text, drop := errText(cerr), ""
	if errors.Is(cerr, ErrNotFound) {
		text, drop = notFoundMark+text, "drop"
	}
	var throttle time.Duration
	if c.opts.stale > 0 || c.opts.beta > 0 {
		throttle = c.opts.refreshRetry
	}
	return scriptCall{Script: script.Fail, Keys: []string{ks.Lock, ks.Errs, ks.Channel, ks.Throttle, ks.Value},
		Args: []any{token, text, redisutil.Millis(c.opts.lease + time.Second), c.publish, redisutil.Millis(throttle), drop}}
}

// set is Set, and SetTagged with tags.
func (c *core[T]) set(ctx context.Context, key string, v T, ttl time.Duration, tags []string) error {
	ttl, err := c.checkTTL(key, ttl)
	if err != nil {
		return err
	}
	ks := c.keys(key)
	b, err := c.encode(v)
	if err != nil {
		return fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	stored := c.jittered(ttl) + c.opts.stale
	calls := append(make([]scriptCall, 0, 1+len(tags)), scriptCall{Script: script.Set, Keys: []string{ks.Value, ks.Lock, ks.Channel},
		Args: []any{b, redisutil.Millis(stored), c.publish}})
	calls = append(calls, c.space.TagCalls(ks.Value, stored, tags)...)
	err = c.guard(ctx, func() error {
		if len(calls) == 1 || !c.oneNode() {
			// Where a tag's set and the value live on different nodes,
			// the value first: added to a set before it is stored, it
			// could be voided by an InvalidateTag in between and then
			// stored, out of every set, for good.
			err := calls[0].Run(ctx, c.client).Err()
			if err == nil && len(calls) > 1 {
				err = redisutil.FirstErr(redisutil.RunScripts(ctx, c.client, calls[1:]))
			}
			if err != nil && len(calls) > 1 {
				// Stored (or its reply lost) but maybe in no tag's set,
				// where InvalidateTag would never find it: undone, unless
				// a later write replaced it.
				redisutil.Rollback(ctx, func(ctx context.Context) {
					_ = script.UndoSet.Run(ctx, c.client, []string{ks.Value}, b).Err()
				})
			}
			return err
		}
		return redisutil.FirstErr(redisutil.RunScripts(ctx, c.client, calls))
	})
	c.forget(ks.Value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "set", key, err)
	}
	return nil
}

// errText is the text of a failed compute that waiting processes receive,
// cut to a size that is reasonable to keep in Redis, without a leading
// "dogpile: " (they wrap it in an error of their own that has one).
func errText(err error) string {
	const maxLen = 512
	s := strings.TrimPrefix(err.Error(), "dogpile: ")
	if len(s) > maxLen {
		s = s[:maxLen]
	}
	return s
}
