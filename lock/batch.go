package lock

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/perclient"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Calls that overlap share round trips. A plain mutex's acquire or
// release goes straight to Redis while few calls are in progress on its
// client (directCalls), so an uncontended Lock pays nothing for this. One
// that starts while more are in progress joins the queue of the server it
// is for, and a goroutine per queue sends it as a pipeline: with many
// goroutines locking (each its own name, say), the client's and the
// server's system calls, which are most of what a call costs, are shared
// by the batch. While one pipeline is in flight, a second goroutine sends
// another once pipelineMin calls wait (see maxPipelines).
//
// A caller still returns by its context's deadline: it waits for its
// batch or for its context, whichever ends first. Its request may then
// still run, as when a direct request times out, and the caller rolls it
// back the same way (see rollback). A batch is sent on a context
// detached from its callers' cancellation, bounded by the latest of
// their deadlines; a caller whose context is done before its batch is
// sent is dropped from it, and has nothing to roll back.
//
// A batcher does not refer to its client (see perclient.Map): each call
// brings it.
type batcher struct {
	calls atomic.Int32 // calls in progress on the client, direct or queued
	// Each server (a Cluster's master, a Ring's shard; see serverOf) has a
	// lane of its own, so that a stopped master holds up only its own
	// calls.
	lanes sync.Map // server address → *lane
}

// A lane is the queue of one server's batched calls.
type lane struct {
	mu        sync.Mutex
	queue     []*batched
	pipelines int // goroutines sending the queue, each a pipeline at a time
}

// maxPipelines is how many pipelines of one lane may be in flight at once,
// and pipelineMin how many calls must wait before a second one starts.
// With one, the client and the server took turns: the server idle while the
// client read a batch's replies and woke its callers, the client idle while
// the server ran the next; 16 goroutines locking on 2 cores used 1.2 of
// them. Two overlap those turns (Lock+Unlock pairs/s ×1.19 in one process,
// the same client CPU per pair); a second one sent for fewer than 4 calls
// shares too few system calls, a third buys little more for more CPU (see
// bench/README.md).
const (
	maxPipelines = 2
	pipelineMin  = 4
)

// A batched call waits in a queue for its pipeline.
type batched struct {
	ctx    context.Context
	client redis.UniversalClient
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd    // set before done is closed
	done   chan struct{} // closed once cmd is set
	state  atomic.Int32  // queued, then sent or left
}

// A batched call's state: it leaves the queue once, either sent or left
// behind by its caller, whichever comes first.
const (
	callQueued = iota
	callSent
	callLeft
)

// A call whose caller left while it was still queued fails with
// redisutil.ErrNotSent: it never reached Redis, so there is nothing to roll
// back (and no rollback slot to hold while Redis is stalled).

var batchers perclient.Map[*batcher]

// directCalls is how many calls in progress on one client go straight to
// Redis: up to that many, each keeps its own round trip, since a batch
// waits for the one before it. Twice the processors (read once, at
// start): with fewer callers than that (2 cores: 4 goroutines) a queue's
// hand-offs cost more than shared system calls save; at 8 goroutines they
// save 15 % of each call's time, at 16 a third to a half (see
// bench/README.md). A variable for tests.
var directCalls atomic.Int32

func init() { directCalls.Store(int32(2 * runtime.GOMAXPROCS(0))) }

// batcherFor returns client's batcher, shared by every mutex on it.
func batcherFor(client redis.UniversalClient) *batcher {
	if b, ok := batchers.Load(client); ok {
		return b
	}
	b, _ := batchers.LoadOrStore(client, &batcher{})
	return b
}

// serverOf names the server key lives on: a Cluster's master, a Ring's
// shard; "" for a client of one server, a Cluster with no slot map yet or
// a Ring with no live shard (the lane of unknown servers).
func serverOf(ctx context.Context, client redis.UniversalClient, key string) string {
	var n *redis.Client
	switch c := client.(type) {
	case *redis.ClusterClient:
		n, _ = c.MasterForKey(ctx, key)
	case *redis.Ring:
		n, _ = c.GetShardClientForKey(key)
	}
	if n == nil {
		return ""
	}
	return n.Options().Addr
}

// run runs script on client, b's, as Script.Run does: on its own while at
// most directCalls calls are in progress, else in the next batch of the
// lane of the server its first key lives on.
func (b *batcher) run(ctx context.Context, client redis.UniversalClient, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	n := b.calls.Add(1)
	defer b.calls.Add(-1)
	if n <= directCalls.Load() {
		return script.Run(ctx, client, keys, args...)
	}
	server := serverOf(ctx, client, keys[0])
	v, ok := b.lanes.Load(server)
	if !ok {
		v, _ = b.lanes.LoadOrStore(server, &lane{})
	}
	l := v.(*lane)
	c := &batched{ctx: ctx, client: client, script: script, keys: keys, args: args, done: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, c)
	start := l.pipelines == 0 || l.pipelines < maxPipelines && len(l.queue) >= pipelineMin
	if start {
		l.pipelines++
	}
	l.mu.Unlock()
	if start {
		go b.flush(l)
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callLeft) || c.state.Load() == callLeft {
			return failed(ctx, fmt.Errorf("%w: %w", ctx.Err(), redisutil.ErrNotSent))
		}
		return failed(ctx, &inFlight{ctx.Err(), c.done}) // sent: it may run
	}
}

// An inFlight is the error of a batched call whose caller left after it
// was sent: it may still run. done closes once its batch is answered (see
// releaseAfter).
type inFlight struct {
	error
	done <-chan struct{}
}

func (e *inFlight) Unwrap() error { return e.error }

// flush sends l's queue, batch after batch, until it finds it empty.
func (b *batcher) flush(l *lane) {
	for {
		l.mu.Lock()
		q := l.queue
		l.queue = nil
		if len(q) == 0 {
			l.pipelines--
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		b.send(q)
	}
}

// send runs q's calls in one pipeline, all but those whose caller has
// gone, and hands each its reply.
func (b *batcher) send(q []*batched) {
	live := make([]*batched, 0, len(q))
	for _, c := range q {
		if c.ctx.Err() == nil && c.state.CompareAndSwap(callQueued, callSent) {
			live = append(live, c)
			continue
		}
		c.state.Store(callLeft) // its caller has gone, or goes now: never sent
		c.cmd = failed(c.ctx, redisutil.ErrNotSent)
		close(c.done)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	b.pipeline(ctx, live, (*redis.Script).EvalSha)
	// A script flushed from the server's cache (a restart, a failover,
	// SCRIPT FLUSH) ran for no one: its calls go again, as EVAL, which
	// loads it, in one more pipeline; not those whose caller has gone.
	var again []*batched
	for _, c := range live {
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") && c.ctx.Err() == nil {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		b.pipeline(ctx, again, (*redis.Script).Eval)
	}
	for _, c := range live {
		close(c.done)
	}
}

// pipeline sends q's calls with send (EvalSha or Eval) in one pipeline, on
// their client (one batcher's calls share it).
func (b *batcher) pipeline(ctx context.Context, q []*batched, send func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd) {
	_, _ = q[0].client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range q {
			c.cmd = send(c.script, ctx, p, c.keys, c.args...)
		}
		return nil
	})
}

// batchContext returns the context of a batch: the first call's values,
// none of its callers' cancellation, and the latest of their deadlines,
// or none if one of them has none.
func batchContext(q []*batched) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(q[0].ctx)
	var latest time.Time
	for _, c := range q {
		d, ok := c.ctx.Deadline()
		if !ok {
			return base, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(base, latest)
}

// failed returns a reply that carries err.
func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
