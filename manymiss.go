package dogpile

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// FetchMany's round trips: the batch read of every key and the batch lock
// attempt of the misses. From the lock attempt on, each key goes its own
// way: won keys to one compute (see computeMany), the others into Fetch's
// miss path, started from the reply the batch got (see miss.first).

// A batch is the missing keys of one FetchMany that it leads.
type batch[T any] struct {
	jobs    []*job[T]
	down    bool // Redis is unreachable and WithComputeWhenDown is set
	compute manyFunc[T]
}

// joinMisses joins or starts the flight of each missing key (see Fetch):
// a key whose flight another caller in this process leads is awaited, and
// the others start one batch.
func (c *core[T]) joinMisses(ctx context.Context, misses []missing, ttl time.Duration, compute manyFunc[T]) []want {
	ws := make([]want, len(misses))
	b := &batch[T]{compute: compute}
	for i, m := range misses {
		id := flightID{Kind: fetchFlight, Key: m.vk}
		cl, lead := c.flights.Join(id, c.near.Heard())
		ws[i] = want{m, cl}
		if !lead {
			c.stats.shared.Add(1)
			continue
		}
		// Joinable only if the read was tracked and no invalidation of the
		// key came since (it found no flight to forget, and Redis reports a
		// key once per read): see group.join.
		if c.near != nil && (!m.tracked || !c.near.Good(m.vk, m.tk)) {
			c.unheard(id, cl)
		}
		c.flights.Detach(cl, nil) // FetchMany waits for it (see collect)
		b.down = b.down || m.down
		j := newJob[T](id, m.key, ttl, nil, cl)
		j.bad = m.bad
		b.jobs = append(b.jobs, j)
	}
	if len(b.jobs) == 0 {
		return ws
	}
	bctx, stop := c.life.Detach(ctx)
	if !c.life.Go(func() { defer stop(); c.runBatch(bctx, b) }) {
		stop()
		for _, j := range b.jobs {
			c.flights.End(j.flight, j.cl, outcome{err: ErrClosed})
		}
	}
	return ws
}

// runBatch is the miss path of a batch, on a context detached from the
// caller's: one lock attempt for all its keys, then one compute for the
// keys it won, while the others wait (each in Fetch's miss path).
func (c *core[T]) runBatch(ctx context.Context, b *batch[T]) {
	defer func() {
		if r := recover(); r != nil { // a bug here must not crash the caller's process
			err := fmt.Errorf("dogpile: fetch many: internal panic: %v\n%s", r, debug.Stack())
			for _, j := range b.jobs {
				c.flights.End(j.flight, j.cl, outcome{err: err})
			}
		}
	}()
	if b.down {
		c.computeLocalMany(ctx, b.jobs, b.compute)
		return
	}
	token := redisutil.Token()
	sent := time.Now()
	replies := c.lockMany(ctx, b, token)
	var won, failed []*job[T]
	var errs []error
	for i, j := range b.jobs {
		res, err := replies[i].res, replies[i].err
		if err != nil {
			failed, errs = append(failed, j), append(errs, err)
			continue
		}
		switch kind, _ := script.At[int64](res, 0); kind {
		case script.Locked:
			won = append(won, j)
			continue
		case script.Value:
			s, _ := script.At[string](res, 1)
			if _, _, derr := c.decodeEntry([]byte(s)); derr == nil {
				c.flights.End(j.flight, j.cl, outcome{b: []byte(s)})
				continue
			}
		}
		// Busy, failed, or a value that does not decode: Fetch's miss path
		// takes it from this reply, and computes it alone if it takes over.
		j.first, j.compute = res, one(j.key, b.compute)
		c.startFlight(ctx, j, false)
	}
	if len(failed) > 0 {
		c.lockFailed(ctx, failed, errs, token, b.compute)
	}
	if len(won) > 0 {
		c.computeMany(ctx, won, token, sent, b.compute)
	}
}

// A lockReply is one key's reply to FetchMany's lock attempt.
type lockReply struct {
	res []any
	err error
}

// lockMany runs script.FetchMany for the keys of b, one call per slot
// group in one pipeline, in one turn among the Cache's lock attempts.
func (c *core[T]) lockMany(ctx context.Context, b *batch[T], token string) []lockReply {
	vks := make([]string, len(b.jobs))
	for i, j := range b.jobs {
		vks[i] = j.ks.Value
	}
	groups := redisutil.SlotGroups(c.client, vks, maxGroup)
	calls := make([]scriptCall, len(groups))
	lease := redisutil.Millis(c.opts.lease)
	for gi, g := range groups {
		keys, args := make([]string, 0, 3*len(g)), make([]any, 0, 2+len(g))
		args = append(args, token, lease)
		for _, i := range g {
			ks := b.jobs[i].ks
			keys = append(keys, ks.Value, ks.Lock, ks.Errs)
			args = append(args, b.jobs[i].bad)
		}
		calls[gi] = scriptCall{Script: script.FetchMany, Keys: keys, Args: args}
	}
	// The turn is waited for whatever ctx does: ctx ends at Close, and a
	// turn is held one round trip, so it comes. (Acquire on an ended
	// context fails, and a Release without it would panic.)
	_ = c.attempts.Acquire(context.WithoutCancel(ctx), 1)
	cmds := redisutil.RunScripts(ctx, c.client, calls)
	c.attempts.Release(1)
	out := make([]lockReply, len(b.jobs))
	for gi, g := range groups {
		res, err := cmds[gi].Slice()
		for n, i := range g {
			if err == nil {
				if out[i].res, _ = script.At[[]any](res, n); out[i].res == nil {
					err = fmt.Errorf("unexpected script reply %v", res)
				}
			}
			out[i].err = err
		}
	}
	return out
}

// lockFailed handles the keys whose lock attempt got no reply (errs, in
// order): it undoes the locks the script may have taken, then computes
// without the cache (Redis unreachable, WithComputeWhenDown) or fails them.
func (c *core[T]) lockFailed(ctx context.Context, js []*job[T], errs []error, token string, compute manyFunc[T]) {
	var undo []scriptCall
	var down []*job[T]
	for i, j := range js {
		if redisutil.MayHaveRun(errs[i]) {
			undo = append(undo, releaseCall(j.ks, token, c.publish))
		}
		if c.opts.computeIfDown && unreachable(errs[i]) {
			down = append(down, j)
			continue
		}
		c.flights.End(j.flight, j.cl, outcome{err: fmt.Errorf("dogpile: fetch %q: %w", j.key, errs[i])})
	}
	if len(undo) > 0 {
		c.rollback(ctx, undo...)
	}
	if len(down) > 0 {
		c.computeLocalMany(ctx, down, compute)
	}
}

// readMany is the hit path of many keys: an MGET per slot group (see
// readManyRedis), one round trip per node, through the client's circuit
// breaker.
func (c *core[T]) readMany(ctx context.Context, vks []string) []read {
	rs := make([]read, len(vks))
	done, err := c.allow(ctx)
	if err != nil {
		for i := range rs {
			rs[i].err = err
		}
		return rs
	}
	if c.near != nil {
		err = c.readManyNear(ctx, vks, rs)
	} else {
		err = c.readManyRedis(ctx, c.client, vks, rs)
	}
	c.report(done, err)
	return rs
}

// readManyNear reads the keys of each node on one of the near tier's
// tracked connections of that node, if one is free (the nodes in
// parallel), and the others through the client (see readNear).
func (c *core[T]) readManyNear(ctx context.Context, vks []string, rs []read) error {
	nodes := make(map[string][]int)
	for i, vk := range vks {
		n := c.near.Tracker().Node(vk)
		nodes[n] = append(nodes[n], i)
	}
	var mu sync.Mutex
	var rest []int
	var wg sync.WaitGroup
	for node, is := range nodes {
		read := func() {
			ks, part := make([]string, len(is)), make([]read, len(is))
			for n, i := range is {
				ks[n] = vks[i]
			}
			o, err, ok := c.near.Tracker().Read(ctx, node, func(cn redis.Cmdable) error {
				return c.readManyRedis(ctx, cn, ks, part)
			})
			mu.Lock()
			defer mu.Unlock()
			if !ok || o == nil || answered(err) { // see readNear
				rest = append(rest, is...)
				return
			}
			for n, i := range is {
				rs[i] = part[n]
				rs[i].owner = o
			}
		}
		if len(nodes) == 1 {
			read() // a single server: no goroutine
		} else {
			wg.Go(read)
		}
	}
	wg.Wait()
	if len(rest) == 0 {
		return nil
	}
	ks, part := make([]string, len(rest)), make([]read, len(rest))
	for n, i := range rest {
		ks[n] = vks[i]
	}
	err := c.readManyRedis(ctx, c.client, ks, part)
	for n, i := range rest {
		rs[i] = part[n]
	}
	return err
}
