package dogpile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// FetchMany's compute: one call for every key a batch won, one lease
// renewal for them all, and fenced stores (or failures) sent per key in
// one pipeline.

// computeMany runs compute once for the keys of js, whose locks this
// process holds with token (taken by a request sent at sent), stores each
// value, fenced by its own lock, wakes the waiters and ends each key's
// flight. A key compute leaves out of its map is not found; compute's
// error fails every key of js.
func (c *core[T]) computeMany(ctx context.Context, js []*job[T], token string, sent time.Time, compute manyFunc[T]) {
	cctx, cancel, ro, stop := c.computeContext(ctx, sent)
	defer stop()
	keys := make([]string, len(js))
	for i, j := range js {
		c.flights.SetBusy(j.cl, ro.taggedWith)
		keys[i] = j.key
	}
	if c.beforeCompute != nil {
		c.beforeCompute(keys[0])
	}
	var vals map[string]T
	cerr, took, lost := c.underLease(cctx, cancel, ro, sent, c.extendMany(js, token),
		Event{Key: keys[0], Keys: keys}, func(ctx context.Context) (err error) {
			vals, err = compute(ctx, slices.Clone(keys)) // compute may keep or change its slice
			return err
		})
	if cerr != nil && errors.Is(context.Cause(cctx), ErrClosed) {
		c.releaseMany(ctx, js, token) // other processes take over at once
		for _, j := range js {
			c.flights.End(j.flight, j.cl, outcome{err: ErrClosed})
		}
		return
	}
	if lost && cerr != nil {
		// Every lock was lost while compute ran (the keys were Set or
		// Deleted, or Redis was unreachable for a lease) and compute gave
		// up: each key looks again, as a newcomer, on its own.
		c.restartMany(ctx, js, token, compute)
		return
	}
	again := c.storeMany(ctx, js, token, func(j *job[T]) ([]byte, time.Duration, error) {
		v, ok := vals[j.key]
		kerr := cerr
		if kerr == nil && !ok {
			kerr = errNotFound(j.key)
		}
		return c.entry(j, v, kerr, took, ro)
	}, ro)
	if len(again) > 0 {
		c.restartMany(ctx, again, token, compute) // see errRefused
	}
}

// storeMany stores the entry of each key of js (or its failure), each
// fenced by its own lock held with token, in one pipeline, with the tags
// compute gave them (ro; see tagFirst), and ends each key's flight but
// those of the keys whose store was refused (see errRefused), which it
// returns.
func (c *core[T]) storeMany(ctx context.Context, js []*job[T], token string, entry func(*job[T]) ([]byte, time.Duration, error), ro *resultOpts) (overtaken []*job[T]) {
	calls, outs := make([]scriptCall, len(js)), make([]outcome, len(js))
	var splitAt []int // the keys whose tags go first
	var vks []string
	var ttls []time.Duration
	for i, j := range js {
		b, ttl, err := entry(j)
		if err != nil {
			outs[i], calls[i] = outcome{err: err}, c.failCall(j.ks, token, err)
			continue
		}
		var split bool
		outs[i] = outcome{b: b}
		if calls[i], split = c.storeCallFor(j.ks, token, b, ttl, ro); split {
			splitAt, vks, ttls = append(splitAt, i), append(vks, j.ks.Value), append(ttls, ttl)
		}
	}
	dctx, dcancel := redisutil.Detached(ctx)
	defer dcancel()
	refused := make([]bool, len(js)) // overtaken on another node: released
	if len(splitAt) > 0 {
		for n, over := range c.tagFirst(dctx, ro, vks, ttls) {
			if i := splitAt[n]; over {
				refused[i], calls[i] = true, releaseCall(js[i].ks, token, c.publish)
			}
		}
	}
	cmds := redisutil.RunScripts(dctx, c.client, calls)
	for i, j := range js {
		if n, err := cmds[i].Int64(); refused[i] || outs[i].b != nil && err == nil && n < 1 {
			overtaken = append(overtaken, j)
			continue
		}
		if outs[i].b != nil {
			outs[i].err = c.stored(ctx, j, token, cmds[i].Err())
		}
		c.flights.End(j.flight, j.cl, outs[i])
	}
	return overtaken
}

// extendMany extends the leases of js's locks held with token: one
// script.Extend per slot group, in one pipeline. It reports them held while
// any is: a key whose lock was taken away (Set, Delete) is fenced off at
// its store, and must not cancel the compute of the others.
func (c *core[T]) extendMany(js []*job[T], token string) extender {
	vks := make([]string, len(js))
	for i, j := range js {
		vks[i] = j.ks.Value
	}
	groups := redisutil.SlotGroups(c.client, vks, maxGroup)
	locks := make([][]string, len(groups))
	for gi, g := range groups {
		locks[gi] = make([]string, len(g))
		for n, i := range g {
			locks[gi][n] = js[i].ks.Lock
		}
	}
	return func(ctx context.Context, ttl time.Duration) (bool, error) {
		calls := make([]scriptCall, len(groups))
		for gi := range groups {
			calls[gi] = scriptCall{Script: script.Extend, Keys: locks[gi], Args: []any{token, redisutil.Millis(ttl)}}
		}
		var first error
		for _, cmd := range redisutil.RunScripts(ctx, c.client, calls) {
			n, err := cmd.Int64()
			switch {
			case err == nil && n > 0:
				return true, nil
			case err != nil && first == nil:
				first = err
			}
		}
		return false, first
	}
}

// restartMany gives up the locks of js held with token, and starts each
// key's miss over in Fetch's miss path, with compute called for that key
// alone.
func (c *core[T]) restartMany(ctx context.Context, js []*job[T], token string, compute manyFunc[T]) {
	c.releaseMany(ctx, js, token)
	for _, j := range js {
		j.first, j.compute, j.bad = nil, one(j.key, compute), ""
		c.startFlight(ctx, j, false)
	}
}

// releaseMany gives up the locks of js held with token, in one pipeline.
func (c *core[T]) releaseMany(ctx context.Context, js []*job[T], token string) {
	undo := make([]scriptCall, len(js))
	for i, j := range js {
		undo[i] = releaseCall(j.ks, token, c.publish)
	}
	dctx, cancel := redisutil.Detached(ctx)
	redisutil.RunScripts(dctx, c.client, undo)
	cancel()
}

// computeLocalMany runs compute for the keys of js without the cache, when
// Redis is unreachable and WithComputeWhenDown is set.
func (c *core[T]) computeLocalMany(ctx context.Context, js []*job[T], compute manyFunc[T]) {
	keys := make([]string, len(js))
	for i, j := range js {
		c.flights.SetBusy(j.cl, nil)
		keys[i] = j.key
	}
	var vals map[string]T
	cerr := c.runCompute(ctx, Event{Key: keys[0], Keys: keys}, func(ctx context.Context) (err error) {
		vals, err = compute(ctx, slices.Clone(keys))
		return err
	})
	for _, j := range js {
		r := outcome{err: cerr}
		if cerr == nil {
			if v, ok := vals[j.key]; !ok {
				r.err = errNotFound(j.key)
			} else if r.b, r.err = c.encode(v); r.err != nil {
				r.err = fmt.Errorf("dogpile: encode %q: %w", j.key, r.err)
			}
		}
		c.flights.End(j.flight, j.cl, r)
	}
}

// one turns FetchMany's compute into a compute of key alone, for the paths
// that compute one key: a background refresh, a takeover, a restart. A
// value left out of the map is not found.
func one[T any](key string, compute manyFunc[T]) func(context.Context) (T, error) {
	return func(ctx context.Context) (T, error) {
		vals, err := compute(ctx, []string{key})
		v, ok := vals[key]
		switch {
		case err != nil:
			var zero T
			return zero, err
		case !ok:
			return v, errNotFound(key)
		}
		return v, nil
	}
}
