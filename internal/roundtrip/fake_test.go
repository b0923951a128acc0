package roundtrip

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A fake Redis for the batcher's tests: a call is a number to double
// (op), its lane the server it names.

type op struct {
	server  string
	in, out int
}

// fake is the batcher's Redis: it answers calls (out = 2 × in), records
// each pipeline, and holds the pipelines of a server while its gate is
// closed.
type fake struct {
	mu        sync.Mutex
	batches   [][]int // the ins of each pipeline, in the order sent
	deadlines []time.Time
	gates     map[string]chan struct{}
	inSend    atomic.Int32 // pipelines being sent now
	maxInSend atomic.Int32
	sending   chan string // a pipeline of that server started
	direct    atomic.Int32
	hold      chan struct{} // closed: direct calls return; nil: at once
}

func newFake() *fake {
	return &fake{gates: map[string]chan struct{}{}, sending: make(chan string, 100)}
}

// gate holds server's pipelines until the returned func is called, at the
// latest when the test ends (a failed test leaves no sender blocked).
func (f *fake) gate(t *testing.T, server string) (open func()) {
	g := make(chan struct{})
	f.mu.Lock()
	f.gates[server] = g
	f.mu.Unlock()
	open = sync.OnceFunc(func() { close(g) })
	t.Cleanup(open)
	return open
}

func (f *fake) batcher() *Batcher[op] {
	return New(
		func(ctx context.Context, c op) op {
			f.direct.Add(1)
			if f.hold != nil {
				<-f.hold
			}
			c.out = 2 * c.in
			return c
		},
		func(ctx context.Context, c op) string { return c.server },
		func(ctx context.Context, q []*op, ctxs []context.Context) {
			n := f.inSend.Add(1)
			defer f.inSend.Add(-1)
			for m := f.maxInSend.Load(); n > m && !f.maxInSend.CompareAndSwap(m, n); m = f.maxInSend.Load() {
			}
			ins := make([]int, len(q))
			for i, c := range q {
				ins[i] = c.in
			}
			d, _ := ctx.Deadline()
			f.mu.Lock()
			f.batches = append(f.batches, ins)
			f.deadlines = append(f.deadlines, d)
			g := f.gates[q[0].server]
			f.mu.Unlock()
			f.sending <- q[0].server
			if g != nil {
				<-g
			}
			for _, c := range q {
				c.out = 2 * c.in
			}
		})
}

func (f *fake) sent() [][]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]int(nil), f.batches...)
}

// result is what a Do returned.
type result struct {
	c   op
	err error
}

// do runs b.Do(ctx, {server, in}) in a goroutine of its own.
func do(ctx context.Context, b *Batcher[op], server string, in int) <-chan result {
	ch := make(chan result, 1)
	go func() {
		c, err := b.Do(ctx, op{server: server, in: in})
		ch <- result{c, err}
	}()
	return ch
}

// get returns what the Do behind ch returned, failing the test if it has
// not returned within redistest.EventuallyWithin.
func get(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(redistest.EventuallyWithin):
		t.Fatal("Do has not returned")
		return result{}
	}
}

// waitQueued waits until n calls wait in server's lane of b.
func waitQueued(t *testing.T, b *Batcher[op], server string, n int) {
	t.Helper()
	redistest.Eventually(t, fmt.Sprintf("%d calls queued in lane %q", n, server), func() bool {
		q, _ := b.Queued(server)
		return q == n
	})
}

func waitSending(t *testing.T, f *fake, server string) {
	t.Helper()
	select {
	case s := <-f.sending:
		if s != server {
			t.Fatalf("a pipeline of %q started, want %q", s, server)
		}
	case <-time.After(redistest.EventuallyWithin):
		t.Fatalf("no pipeline of %q started", server)
	}
}

// heldLane returns a batcher that queues every call, with the first
// pipeline of server's lane (a call of 0, first) sent and held until open
// is called (at the latest when the test ends).
func heldLane(t *testing.T, server string) (f *fake, b *Batcher[op], first <-chan result, open func()) {
	t.Helper()
	f = newFake()
	b = f.batcher()
	b.SetDirect(0)
	open = f.gate(t, server)
	first = do(context.Background(), b, server, 0)
	waitSending(t, f, server)
	return f, b, first, open
}
