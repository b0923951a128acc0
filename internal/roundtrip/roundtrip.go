// Package roundtrip shares round trips among calls to Redis that overlap: the
// lock's scripts (package lock) and the cache's GETs (package dogpile).
//
// A call goes straight to Redis while few calls are in progress on its
// batcher (see defaultDirect), so a lone call pays nothing for this. One that starts
// while more are in progress joins the queue of the server it is for, and
// a goroutine per queue sends it as a pipeline: with many goroutines
// calling, the client's and the server's system calls, which are most of
// what a small call costs, are shared by the batch. While one pipeline is
// in flight, a second goroutine sends another once PipelineMin calls wait
// (see MaxPipelines).
//
// A caller still returns by its context's deadline: it waits for its
// batch or for its context, whichever ends first. Its request may then
// still run, as when a direct request times out (see InFlight). A batch is
// sent on a context detached from its callers' cancellation, bounded by
// the latest of their deadlines; a caller whose context is done before its
// batch is sent is dropped from it, never sent (redisutil.ErrNotSent).
package roundtrip

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// defaultDirect is how many calls in progress on one batcher go straight
// to Redis: up to that many, each keeps its own round trip, since a batch
// waits for the one before it. Twice the processors (read once, at start):
// with fewer callers than that (2 cores: 4 goroutines) a queue's hand-offs
// cost more than shared system calls save; beyond, they save a growing
// share of a call's time (bench/HISTORY.md, "Figures moved out of code
// comments"). A test sets one batcher's own (Batcher.SetDirect); a test's
// child process, which cannot reach its batchers, is started with
// DOGPILE_TEST_ROUNDTRIP_DIRECT in its environment.
var defaultDirect = directFromEnv(int32(2 * runtime.GOMAXPROCS(0)))

// directFromEnv returns DOGPILE_TEST_ROUNDTRIP_DIRECT if it is set to a
// number, else def.
func directFromEnv(def int32) int32 {
	if n, err := strconv.ParseInt(os.Getenv(DirectEnv), 10, 32); err == nil && n >= 0 {
		return int32(n)
	}
	return def
}

// DirectEnv is the environment variable that sets, for a process started
// by a test, how many calls go straight to Redis (see defaultDirect).
const DirectEnv = "DOGPILE_TEST_ROUNDTRIP_DIRECT"

// SetDirect makes up to n calls in progress on b go straight to Redis (for
// tests: 0 makes every call queue).
func (b *Batcher[C]) SetDirect(n int32) { b.limit.Store(n) }

// MaxPipelines is how many pipelines of one lane may be in flight at once,
// and PipelineMin how many calls must wait before a second one starts.
// With one, the client and the server took turns: the server idle while the
// client read a batch's replies and woke its callers, the client idle while
// the server ran the next. Two overlap those turns; a second one sent for
// fewer than 4 calls shares too few system calls, a third buys little more
// for more CPU (bench/HISTORY.md, "Figures moved out of code comments").
const (
	MaxPipelines = 2
	PipelineMin  = 4
)

// A Batcher batches calls of type C (a request, and room for its reply)
// on one client. It does not refer to its client (see perclient.Map):
// each call brings it.
type Batcher[C any] struct {
	direct func(ctx context.Context, c C) C                          // runs c alone: its reply set
	server func(ctx context.Context, c C) string                     // names c's lane (see ServerOf)
	send   func(ctx context.Context, q []*C, ctxs []context.Context) // runs q in one pipeline, on the batch's ctx; ctxs[i] is q[i]'s caller's
	calls  atomic.Int32                                              // calls in progress, direct or queued
	limit  atomic.Int32                                              // calls in progress that go direct (defaultDirect)
	// Each server (a Cluster's master, a Ring's shard) has a lane of its
	// own, so that a stopped master holds up only its own calls.
	lanes sync.Map // server address → *lane[C]
}

// New returns a Batcher that runs a call with direct when it goes alone,
// and a batch of calls with send, in the lane that server names. They take
// C by value, so that a direct call allocates nothing for the batcher.
func New[C any](direct func(context.Context, C) C, server func(context.Context, C) string, send func(context.Context, []*C, []context.Context)) *Batcher[C] {
	b := &Batcher[C]{direct: direct, server: server, send: send}
	b.limit.Store(defaultDirect)
	return b
}

// A lane is the queue of one server's batched calls.
type lane[C any] struct {
	mu        sync.Mutex
	queue     []*call[C]
	pipelines int // goroutines sending the queue, each a pipeline at a time
}

// A call waits in a queue for its pipeline.
type call[C any] struct {
	ctx  context.Context
	c    C
	err  error         // set, if the call was dropped, before done is closed
	done chan struct{} // closed once c's reply is set, or the call dropped
	// taken is set by whichever comes first: its batch, which sends it,
	// or its caller, who leaves it unsent. A call is sent only if its
	// batch took it.
	taken atomic.Bool
}

// Do runs c, alone while few calls are in progress on b (see
// defaultDirect), else in the next batch of its server's lane, and returns it with its reply
// set. A caller whose ctx ends first gets an error wrapping ctx.Err(): with
// redisutil.ErrNotSent if c was never sent, else an *InFlight (it may
// still run).
func (b *Batcher[C]) Do(ctx context.Context, c C) (C, error) {
	n := b.calls.Add(1)
	defer b.calls.Add(-1)
	if n <= b.limit.Load() {
		return b.direct(ctx, c), nil
	}
	s := b.server(ctx, c)
	v, ok := b.lanes.Load(s)
	if !ok {
		v, _ = b.lanes.LoadOrStore(s, &lane[C]{})
	}
	l := v.(*lane[C])
	q := &call[C]{ctx: ctx, c: c, done: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, q)
	start := l.pipelines == 0 || l.pipelines < MaxPipelines && len(l.queue) >= PipelineMin
	if start {
		l.pipelines++
	}
	l.mu.Unlock()
	if start {
		go b.flush(l)
	}
	select {
	case <-q.done:
		return q.c, q.err
	case <-ctx.Done():
		if q.taken.CompareAndSwap(false, true) {
			l.remove(q)
			return c, notSent(ctx)
		}
		return c, &InFlight{ctx.Err(), q.done} // sent: it may run
	}
}

// remove takes q out of l's queue if it is still there (not yet in a
// batch): a caller that left must not be held, with its ctx and what it
// carries, until a server that stopped answering comes back. So the queue
// holds only callers that still wait.
func (l *lane[C]) remove(q *call[C]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.queue, q); i >= 0 {
		l.queue = slices.Delete(l.queue, i, i+1)
	}
}

// notSent is the error of a call whose caller's ctx ended before it was
// sent.
func notSent(ctx context.Context) error { return fmt.Errorf("%w: %w", ctx.Err(), redisutil.ErrNotSent) }

// An InFlight is the error of a batched call whose caller left after it
// was sent: it may still run. Done closes once its batch is answered.
type InFlight struct {
	error
	Done <-chan struct{}
}

func (e *InFlight) Unwrap() error { return e.error }

// flush sends l's queue, batch after batch, until it finds it empty.
func (b *Batcher[C]) flush(l *lane[C]) {
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
		b.sendLive(q)
	}
}

// sendLive sends q's calls in one pipeline, all but those whose caller
// has gone, and closes each one's done.
func (b *Batcher[C]) sendLive(q []*call[C]) {
	live := make([]*call[C], 0, len(q))
	for _, c := range q {
		// A caller whose ctx ended is leaving: its call is not sent,
		// whether it took it already or is about to.
		if c.ctx.Err() == nil && c.taken.CompareAndSwap(false, true) {
			live = append(live, c)
			continue
		}
		c.err = notSent(c.ctx)
		close(c.done)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	cs, ctxs := make([]*C, len(live)), make([]context.Context, len(live))
	for i, c := range live {
		cs[i], ctxs[i] = &c.c, c.ctx
	}
	b.send(ctx, cs, ctxs)
	for _, c := range live {
		close(c.done)
	}
}

// batchContext returns the context of a batch: the first call's values,
// none of its callers' cancellation, and the latest of their deadlines,
// or none if one of them has none.
func batchContext[C any](q []*call[C]) (context.Context, context.CancelFunc) {
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

// ServerOf names the server key lives on: a Cluster's master, a Ring's
// shard; "" for a client of one server, a Cluster with no slot map yet or
// a Ring with no live shard (the lane of unknown servers).
func ServerOf(ctx context.Context, client redis.UniversalClient, key string) string {
	n, _ := redisutil.NodeOf(ctx, client, key)
	if n == nil {
		return ""
	}
	return n.Options().Addr
}

// Calls returns how many calls are in progress on b (for tests).
func (b *Batcher[C]) Calls() int32 { return b.calls.Load() }

// Queued returns how many calls wait in server's lane, and whether it has
// one (for tests).
func (b *Batcher[C]) Queued(server string) (int, bool) {
	v, ok := b.lanes.Load(server)
	if !ok {
		return 0, false
	}
	l := v.(*lane[C])
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue), true
}
