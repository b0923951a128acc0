package dogpile

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// byGoroutine is msgpack that records which goroutine each Unmarshal ran in.
type byGoroutine struct {
	mu      sync.Mutex
	decoded map[string]int // goroutine -> Unmarshal calls
}

func (c *byGoroutine) Marshal(v any) ([]byte, error) { return MsgPack.Marshal(v) }
func (c *byGoroutine) Unmarshal(b []byte, v any) error {
	c.mu.Lock()
	c.decoded[goid()]++
	c.mu.Unlock()
	return MsgPack.Unmarshal(b, v)
}

type withSlice struct{ S []int }

// TestWaitersTakeCopies: the callers that waited for a flight get values
// decoded by the flight's goroutine, not by themselves (with one P, that
// goroutine fills every slot before a waiter runs), each with its own
// memory.
func TestWaitersTakeCopies(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	s := redistest.StartServer(t)
	codec := &byGoroutine{decoded: map[string]int{}}
	c := New[withSlice](s.Client(t), prefix(t), WithCodec(codec))
	defer c.Close()
	const n = 20
	release := make(chan struct{})
	compute := func(context.Context) (withSlice, error) {
		<-release
		return withSlice{S: []int{1, 2, 3}}, nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the miss runs in a goroutine of its own
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	waiters := map[string]bool{}
	got := make([]withSlice, n)
	for i := range n {
		wg.Go(func() {
			mu.Lock()
			waiters[goid()] = true
			mu.Unlock()
			v, err := c.Fetch(ctx, "k", time.Minute, compute)
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		})
	}
	redistest.Eventually(t, "every caller joined the flight", func() bool { return c.Stats().Shared == n-1 })
	close(release)
	wg.Wait()
	arrays := map[*int]bool{}
	for i, v := range got {
		if fmt.Sprint(v.S) != "[1 2 3]" {
			t.Fatalf("caller %d got %v", i, v)
		}
		arrays[&v.S[0]] = true
	}
	if len(arrays) != n {
		t.Errorf("%d callers share %d slices: each must have its own", n, len(arrays))
	}
	own := 0
	for g, k := range codec.decoded {
		if waiters[g] {
			own += k
		}
	}
	if own > 0 {
		t.Errorf("%d of %d waiters decoded their own value; want none: the flight's goroutine decodes for them first", own, n)
	}
}

// TestCopiesRace: waiters taking slots from the front while the ender
// fills them from the back each get a copy or decode their own, never the
// same slot twice, whatever the interleaving (run with -race).
func TestCopiesRace(t *testing.T) {
	c := New[withSlice](nopClient(t), prefix(t))
	defer c.Close()
	b, err := c.encodeEntry(withSlice{S: []int{7}}, meta{})
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		const n = 16
		r := withCopies[withSlice](outcome{b: b}, n)
		cs := r.copies.(*copies[withSlice])
		var wg sync.WaitGroup
		seen := make([]*int, n)
		for i := range n {
			wg.Go(func() {
				v, _, ok := cs.take()
				if !ok {
					v, _, _ = c.decodeEntry(b)
				}
				if len(v.S) != 1 || v.S[0] != 7 {
					t.Errorf("waiter %d got %v", i, v)
					return
				}
				seen[i] = &v.S[0]
			})
		}
		c.fill(r)
		wg.Wait()
		distinct := map[*int]bool{}
		for _, p := range seen {
			distinct[p] = true
		}
		if len(distinct) != n {
			t.Fatalf("%d waiters got %d distinct values", n, len(distinct))
		}
	}
}
