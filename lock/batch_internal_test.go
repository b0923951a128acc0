package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

// TestBatchDropsCallersThatLeft: with Redis stopped, a call that joins a
// batch and whose caller gives up before the batch is sent is never sent:
// it takes nothing, and no rollback holds a slot for it while Redis is
// stalled.
func TestBatchDropsCallersThatLeft(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	batcherFor(rdb).SetDirect(1) // b and c queue; c behind b's batch
	defer rdb.Close()
	var sent acquires
	rdb.AddHook(sent.hook())
	ctx := t.Context()
	for _, name := range []string{"a", "b", "c"} { // load the scripts
		l, err := NewMutex(rdb, name).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Unlock(ctx)
	}
	sent.reset()

	srv.Pause()
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b"} { // a goes straight to Redis, b in a batch; both wait
		wg.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l, err := NewMutex(rdb, name).Lock(lctx)
			if err != nil {
				t.Errorf("Lock(%s) after the pause = %v", name, err)
				return
			}
			l.Unlock(lctx)
		})
		waitCalls(t, rdb, int32(i+1))
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := NewMutex(rdb, "c").Lock(gone); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock(c) with its context done = %v; want context.Canceled", err)
	}
	if n := Rollbacks(); n != 0 {
		t.Errorf("%d rollbacks in flight; want none: c's request was never sent", n)
	}
	srv.Resume()
	wg.Wait()
	WaitRollbacks()
	if keys := sent.keys(); slices.Contains(keys, NewMutex(rdb, "c").lock) {
		t.Errorf("acquires sent for %v; want none for c, whose caller had gone", keys)
	}
}

// acquires records the lock keys of the acquire scripts a client sends.
type acquires struct {
	mu   sync.Mutex
	sent []string
}

func (h *acquires) reset() {
	h.mu.Lock()
	h.sent = nil
	h.mu.Unlock()
}

func (h *acquires) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sent)
}

func (h *acquires) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if a := c.Args(); len(a) > 3 && a[1] == mutexAcquire.Hash() {
			h.sent = append(h.sent, a[3].(string))
		}
	}
}

// hook records what the client it is added to sends, alone or in a
// pipeline.
func (h *acquires) hook() redistest.Hook {
	return redistest.Hook{Before: h.record}
}

// TestBatchLanePerMaster: on a Cluster with one master stopped, calls
// batched for the other masters go on: each master has a lane of its own.
// (In one queue, they waited behind a batch bound for the stopped master.)
func TestBatchLanePerMaster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	batcherFor(cc).SetDirect(1) // every call but one is batched
	defer cc.Close()
	ctx := t.Context()
	var stopped, running []string
	for i := 0; len(stopped) < 4 || len(running) < 8; i++ {
		name := fmt.Sprintf("lane%d", i)
		m := NewMutex(cc, name)
		node, err := cc.MasterForKey(ctx, m.lock)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == cl.Nodes[0].Addr() {
			stopped = append(stopped, name)
		} else {
			running = append(running, name)
		}
		l, err := m.Lock(ctx) // loads the scripts on every master
		if err != nil {
			t.Fatal(err)
		}
		l.Unlock(ctx)
	}

	cl.Nodes[0].Pause()
	var held, wg sync.WaitGroup
	for _, name := range stopped[:4] {
		held.Go(func() {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			NewMutex(cc, name).Lock(lctx) // held up until its deadline
		})
	}
	waitCalls(t, cc, 4) // one sent straight, three in the stopped master's batch
	for _, name := range running[:8] {
		wg.Go(func() {
			m := NewMutex(cc, name)
			for range 5 {
				lctx, cancel := context.WithTimeout(ctx, time.Second)
				l, err := m.Lock(lctx)
				if err == nil {
					err = l.Unlock(lctx)
				}
				cancel()
				if err != nil {
					t.Errorf("%s on a running master: %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait() // all while the stopped master's calls still wait
	cl.Nodes[0].Resume()
	held.Wait()
	WaitRollbacks()
}

// waitCalls waits until n calls are in progress on client's batcher.
func waitCalls(t *testing.T, client redis.UniversalClient, n int32) {
	t.Helper()
	b := batcherFor(client)
	if !redistest.Within(redistest.EventuallyWithin, func() bool { return b.Calls() >= n }) {
		t.Fatalf("%d calls in progress after %v; want %d", b.Calls(), redistest.EventuallyWithin, n)
	}
}

// TestBatchSecondPipeline: while a lane's pipeline is in flight, a second
// one goes out once roundtrip.PipelineMin calls wait, not before, and never a third.
func TestBatchSecondPipeline(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	batcherFor(rdb).SetDirect(1) // all but the first call queue
	defer rdb.Close()
	var mu sync.Mutex
	var sizes []int // of the pipelines sent: all in flight, the server stopped
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if !redistest.IsHandshake(cmds[0]) {
			mu.Lock()
			sizes = append(sizes, len(cmds))
			mu.Unlock()
		}
		return next(ctx, cmds)
	}})
	sent := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
	ctx := t.Context()
	l, err := NewMutex(rdb, "load").Lock(ctx) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
	srv.Pause()
	var wg sync.WaitGroup
	lock := func(name string) {
		wg.Go(func() {
			if l, err := NewMutex(rdb, name).Lock(ctx); err != nil {
				t.Errorf("Lock(%s) = %v", name, err)
			} else {
				l.Unlock(ctx)
			}
		})
	}
	b := batcherFor(rdb)
	queued := func() int {
		n, _ := b.Queued("")
		return n
	}
	lock("direct")
	waitCalls(t, rdb, 1)
	lock("first")
	redistest.Eventually(t, "the first pipeline", func() bool { return len(sent()) == 1 })
	for i := range roundtrip.PipelineMin - 1 {
		lock(fmt.Sprint("wait", i))
	}
	redistest.Eventually(t, "calls queued", func() bool { return queued() == roundtrip.PipelineMin-1 })
	if got := sent(); len(got) != 1 {
		t.Fatalf("pipelines %v with %d calls waiting; want 1", got, roundtrip.PipelineMin-1)
	}
	lock("more")
	redistest.Eventually(t, "a second pipeline", func() bool { return len(sent()) == 2 })
	for i := range 3 * roundtrip.PipelineMin {
		lock(fmt.Sprint("later", i))
	}
	redistest.Eventually(t, "calls queued", func() bool { return queued() == 3*roundtrip.PipelineMin })
	if got := sent(); !slices.Equal(got, []int{1, roundtrip.PipelineMin}) {
		t.Errorf("pipelines %v in flight; want [1 %d]: a second one once %d calls waited, no third", got, roundtrip.PipelineMin, roundtrip.PipelineMin)
	}
	srv.Resume()
	wg.Wait()
}

// TestBatchUndoWaitsForItsAcquire: an acquire whose caller left while its
// batch was in flight (here, resent as EVAL after a SCRIPT FLUSH) is
// released once that batch is answered, not sooner: on the lane's second
// pipeline, the release reached Redis first, found nothing, and the
// acquire then left the lock held for its TTL.
func TestBatchUndoWaitsForItsAcquire(t *testing.T) {
	srv := redistest.StartServer(t)
	raw := srv.Client(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	batcherFor(rdb).SetDirect(0) // every call queues
	defer rdb.Close()
	ctx := t.Context()
	a := NewMutex(rdb, "a", WithTTL(time.Minute))
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		for _, c := range cmds {
			if args := c.Args(); args[0] == "eval" && fmt.Sprint(args[2]) == "2" && args[3] == a.lock {
				once.Do(func() { close(held) })
				<-release // a's acquire, resent as EVAL, waits here
			}
		}
		return next(ctx, cmds)
	}})
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	actx, leave := context.WithCancel(ctx)
	failed := make(chan error, 1)
	go func() {
		_, err := a.Lock(actx)
		failed <- err
	}()
	<-held
	leave()
	if err := <-failed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock left in flight = %v; want context.Canceled", err)
	}
	var wg sync.WaitGroup
	for _, name := range []string{"b", "c", "d"} { // with a's release, enough for a second pipeline
		wg.Go(func() {
			l, err := NewMutex(rdb, name).Lock(ctx)
			if err != nil {
				t.Errorf("Lock(%s) = %v", name, err)
				return
			}
			l.Unlock(ctx)
		})
	}
	redistest.Eventually(t, "a's release run, or waiting behind the others", func() bool {
		n, _ := batcherFor(rdb).Queued("")
		return Rollbacks() == 0 || Rollbacks() == 1 && n == 3
	})
	close(release)
	wg.Wait()
	redistest.Eventually(t, "a's lock released", func() bool { return raw.Exists(ctx, a.lock).Val() == 0 })
}

// TestBatcherGoesWithItsClient: a client's batcher, lanes and all, goes
// once the program drops the client, as its breaker does: a program that
// makes a client per tenant, or per test, does not keep every one.
func TestBatcherGoesWithItsClient(t *testing.T) {
	srv := redistest.StartServer(t)
	var clients []weak.Pointer[redis.Client]
	func() {
		for range 3 {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			batcherFor(rdb).SetDirect(1) // calls beyond the first go through a lane
			clients = append(clients, weak.Make(rdb))
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					l, err := NewMutex(rdb, fmt.Sprint("m", i)).Lock(t.Context())
					if err != nil {
						t.Errorf("Lock = %v", err)
						return
					}
					l.Unlock(t.Context())
				})
			}
			wg.Wait()
			if b, ok := batchers.Load(rdb); !ok {
				t.Error("no batcher for the client")
			} else if _, ok := b.Queued(""); !ok {
				t.Error("no lane: the calls did not batch")
			}
			_ = rdb.Close()
		}
	}()
	WaitRollbacks()
	redistest.Collected(t, "the closed clients to go (their batchers must not keep them)", func() bool {
		for _, c := range clients {
			if c.Value() != nil {
				return false
			}
		}
		return true
	})
}

// TestBatchRefusedByHook: a pipeline that a client's hook refuses without
// running it fails each of its calls with the hook's error, as a call
// refused alone fails: not with an empty reply.
func TestBatchRefusedByHook(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	batcherFor(rdb).SetDirect(0) // every call queues
	defer rdb.Close()
	refused := errors.New("refused by a hook")
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		return refused
	}})
	if l, err := NewMutex(rdb, "m").Lock(t.Context()); !errors.Is(err, refused) {
		if err == nil {
			l.Unlock(t.Context())
		}
		t.Errorf("Lock through a refused pipeline = %v; want the hook's error", err)
	}
	WaitRollbacks()
}
