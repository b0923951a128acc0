package roundtrip

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// The batcher's own rules, tested with a fake Redis: a call is a number to
// double, its lane the server it names, and each pipeline is recorded and
// may be held until the test lets it go. The packages that use it (lock,
// dogpile) test it against real servers.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoneCallGoesDirect(t *testing.T) {
	f := newFake()
	b := f.batcher()
	c, err := b.Do(context.Background(), op{in: 21})
	if err != nil || c.out != 42 {
		t.Fatalf("Do = %+v, %v; want out 42", c, err)
	}
	if f.direct.Load() != 1 || len(f.sent()) != 0 {
		t.Fatalf("%d direct calls and pipelines %v; want 1 and none", f.direct.Load(), f.sent())
	}
	if b.Calls() != 0 {
		t.Fatalf("%d calls in progress after Do returned", b.Calls())
	}
}

// TestCallsBeyondDirectShareAPipeline: while Direct calls are in
// progress, later ones queue and go out together, each with its own reply.
func TestCallsBeyondDirectShareAPipeline(t *testing.T) {
	f := newFake()
	f.hold = make(chan struct{})
	release := sync.OnceFunc(func() { close(f.hold) })
	t.Cleanup(release)
	b := f.batcher()
	b.SetDirect(1)
	ctx := context.Background()
	direct := do(ctx, b, "", 0) // holds the one direct slot
	redistest.Eventually(t, "the first call to go direct", func() bool { return f.direct.Load() == 1 })
	open := f.gate(t, "")
	first := do(ctx, b, "", 1) // the lane's first pipeline, held
	waitSending(t, f, "")
	var rest []<-chan result
	for i := 2; i < 2+PipelineMin-1; i++ { // too few for a second pipeline
		rest = append(rest, do(ctx, b, "", i))
	}
	waitQueued(t, b, "", PipelineMin-1)
	open()
	for i, ch := range append([]<-chan result{first}, rest...) {
		if r := get(t, ch); r.err != nil || r.c.out != 2*(i+1) {
			t.Fatalf("call %d = %+v, %v; want out %d", i+1, r.c, r.err, 2*(i+1))
		}
	}
	release()
	get(t, direct)
	got := f.sent()
	if len(got) != 2 || len(got[0]) != 1 || len(got[1]) != PipelineMin-1 {
		t.Fatalf("pipelines %v; want [1] then the %d calls queued behind it in one", got, PipelineMin-1)
	}
}

// TestSecondPipeline: a second pipeline starts while one is in flight once
// PipelineMin calls wait, and never more than MaxPipelines per lane.
func TestSecondPipeline(t *testing.T) {
	f, b, first, open := heldLane(t, "")
	ctx := context.Background()
	all := []<-chan result{first}
	for i := 1; i < PipelineMin; i++ {
		all = append(all, do(ctx, b, "", i))
	}
	waitQueued(t, b, "", PipelineMin-1)
	if n := f.inSend.Load(); n != 1 {
		t.Fatalf("%d pipelines in flight with %d calls waiting, want 1", n, PipelineMin-1)
	}
	all = append(all, do(ctx, b, "", PipelineMin))
	waitSending(t, f, "") // the second
	for i := range 3 * PipelineMin {
		all = append(all, do(ctx, b, "", PipelineMin+1+i))
	}
	waitQueued(t, b, "", 3*PipelineMin)
	if n := f.inSend.Load(); n != MaxPipelines {
		t.Fatalf("%d pipelines in flight, want %d", n, MaxPipelines)
	}
	open()
	for _, ch := range all {
		if r := get(t, ch); r.err != nil || r.c.out != 2*r.c.in {
			t.Fatalf("Do = %+v, %v", r.c, r.err)
		}
	}
	if m := f.maxInSend.Load(); m != MaxPipelines {
		t.Fatalf("at most %d pipelines were in flight at once, want %d", m, MaxPipelines)
	}
}

// TestLanePerServer: a server whose pipeline does not come back holds up
// only its own lane's calls.
func TestLanePerServer(t *testing.T) {
	_, b, stuck, open := heldLane(t, "stuck")
	ctx := context.Background()
	queued := do(ctx, b, "stuck", 2)
	waitQueued(t, b, "stuck", 1)
	if r := get(t, do(ctx, b, "fine", 3)); r.err != nil || r.c.out != 6 {
		t.Fatalf("a call to another server = %+v, %v, want out 6", r.c, r.err)
	}
	open()
	for _, ch := range []<-chan result{stuck, queued} {
		if r := get(t, ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
}

// TestQueuedCallerLeaves: a caller whose ctx ends while its call waits in
// the queue returns at once, and its call is never sent.
func TestQueuedCallerLeaves(t *testing.T) {
	f, b, first, open := heldLane(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	left := do(ctx, b, "", 2)
	stays := do(context.Background(), b, "", 3)
	waitQueued(t, b, "", 2)
	cancel()
	r := get(t, left)
	if !errors.Is(r.err, redisutil.ErrNotSent) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the queued caller that left got %v, want ErrNotSent and context.Canceled", r.err)
	}
	open()
	get(t, first)
	if r := get(t, stays); r.err != nil || r.c.out != 6 {
		t.Fatalf("the caller that stayed got %+v, %v", r.c, r.err)
	}
	got := f.sent()
	if len(got) != 2 || len(got[1]) != 1 || got[1][0] != 3 {
		t.Fatalf("pipelines %v; want [0] then [3]: the call whose caller left never sent", got)
	}
}

// TestSentCallerLeaves: a caller whose ctx ends after its call was sent
// returns at once with an InFlight, whose Done closes once the pipeline is
// answered.
func TestSentCallerLeaves(t *testing.T) {
	f := newFake()
	b := f.batcher()
	b.SetDirect(0)
	open := f.gate(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	left := do(ctx, b, "", 1)
	waitSending(t, f, "")
	cancel()
	r := get(t, left)
	var inf *InFlight
	if !errors.As(r.err, &inf) || !errors.Is(r.err, context.Canceled) || errors.Is(r.err, redisutil.ErrNotSent) {
		t.Fatalf("the sent caller that left got %v, want an InFlight wrapping context.Canceled", r.err)
	}
	select {
	case <-inf.Done:
		t.Fatal("InFlight.Done closed before the pipeline was answered")
	default:
	}
	open()
	select {
	case <-inf.Done:
	case <-time.After(redistest.EventuallyWithin):
		t.Fatal("InFlight.Done not closed after the pipeline was answered")
	}
}

// TestBatchDeadline: a pipeline runs until the latest of its callers'
// deadlines, not the first caller's, and with no deadline if one caller
// has none.
func TestBatchDeadline(t *testing.T) {
	soon, cancel1 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel1()
	late, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	latest, _ := late.Deadline()
	for _, tc := range []struct {
		name     string
		ctxs     []context.Context
		deadline time.Time
	}{
		{"the latest", []context.Context{soon, late}, latest},
		{"none if one has none", []context.Context{soon, context.Background()}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, b, first, open := heldLane(t, "")
			chs := []<-chan result{first}
			for i, ctx := range tc.ctxs { // in this order: the first's deadline is not the batch's
				chs = append(chs, do(ctx, b, "", i+1))
				waitQueued(t, b, "", i+1)
			}
			open()
			for _, ch := range chs {
				if r := get(t, ch); r.err != nil {
					t.Fatal(r.err)
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if got := f.deadlines[1]; !got.Equal(tc.deadline) {
				t.Fatalf("the batch's deadline is %v, want %v", got, tc.deadline)
			}
		})
	}
}

// ended is a context that reports its end (Err) before it signals it
// (Done never closes): the moment between the two, made to last.
type ended struct{ context.Context }

func (ended) Err() error { return context.Canceled }

// TestBatchDropsCallerLeaving: a batch does not send a call whose caller's
// ctx has ended, even before the caller has left: it answers ErrNotSent.
func TestBatchDropsCallerLeaving(t *testing.T) {
	f, b, first, open := heldLane(t, "")
	leaving := do(ended{context.Background()}, b, "", 1)
	stays := do(context.Background(), b, "", 2)
	waitQueued(t, b, "", 2)
	open()
	get(t, first)
	if r := get(t, leaving); !errors.Is(r.err, redisutil.ErrNotSent) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the call of an ended ctx got %v, want ErrNotSent and context.Canceled", r.err)
	}
	if r := get(t, stays); r.err != nil || r.c.out != 4 {
		t.Fatalf("the other call got %+v, %v", r.c, r.err)
	}
	if got := f.sent(); len(got) != 2 || len(got[1]) != 1 || got[1][0] != 2 {
		t.Fatalf("pipelines %v; want [0] then [2]: the ended ctx's call never sent", got)
	}
}

// TestLeaversLeaveTheQueue: callers that leave while their lane's
// pipeline is stuck are out of its queue at once, not held (with their
// contexts) until the server answers again.
func TestLeaversLeaveTheQueue(t *testing.T) {
	_, b, _, _ := heldLane(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	var left []<-chan result
	for i := range 3 {
		left = append(left, do(ctx, b, "", i+1))
	}
	waitQueued(t, b, "", 3)
	cancel()
	for _, ch := range left {
		if r := get(t, ch); !errors.Is(r.err, redisutil.ErrNotSent) {
			t.Fatalf("a caller that left got %v, want ErrNotSent", r.err)
		}
	}
	if n, _ := b.Queued(""); n != 0 {
		t.Fatalf("%d calls still queued after their callers left, want 0", n)
	}
}
