package dogpile_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// recorder is an observer that keeps every event, and marks the contexts
// it returns so that tests can tell where they went.
type recorder struct {
	mu     sync.Mutex
	events []dogpile.Event
	ctxOK  []bool // per event: ctx carried the mark of its start event
}

type markKey struct{}

func (r *recorder) observe(ctx context.Context, e dogpile.Event) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	marked := ctx.Value(markKey{}) == e.Kind-1 // an end event gets its start's context
	r.events = append(r.events, e)
	r.ctxOK = append(r.ctxOK, marked)
	if e.Kind == dogpile.EventComputeStart || e.Kind == dogpile.EventWaitStart {
		return context.WithValue(ctx, markKey{}, e.Kind)
	}
	return nil
}

func (r *recorder) kinds() []dogpile.EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []dogpile.EventKind
	for _, e := range r.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func (r *recorder) find(k dogpile.EventKind) (dogpile.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.events {
		if e.Kind == k {
			return e, r.ctxOK[i]
		}
	}
	return dogpile.Event{}, false
}

// TestObserver: a miss computed in one process and awaited in another
// reports compute and wait events with durations, the wake-up's kind and
// the contexts a tracer needs; hits report hits; Stats counts the same.
func TestObserver(t *testing.T) {
	s := redistest.StartServer(t)
	var hr, wr recorder
	holder := dogpile.New[int](s.Client(t), prefix(t), dogpile.WithObserver(hr.observe))
	waiter := dogpile.New[int](s.Client(t), prefix(t), dogpile.WithObserver(wr.observe))
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(ctx context.Context) (int, error) {
		if ctx.Value(markKey{}) != dogpile.EventComputeStart {
			return 0, errors.New("compute did not run with the observer's context")
		}
		time.Sleep(10 * time.Millisecond)
		return 1, nil
	})
	close(release)
	if r := <-hres; r.err != nil {
		t.Fatal(r.err)
	}
	if r := <-wres; r.err != nil {
		t.Fatal(r.err)
	}
	_, err := waiter.Fetch(t.Context(), "k", time.Minute, redistest.NoCompute[int])
	require.NoError(t, err)

	if got, want := hr.kinds(), []dogpile.EventKind{dogpile.EventComputeStart, dogpile.EventComputeEnd, dogpile.EventMiss}; !slices.Equal(got, want) {
		t.Errorf("holder events %v; want %v", got, want)
	}
	if got, want := wr.kinds(), []dogpile.EventKind{dogpile.EventWaitStart, dogpile.EventWaitEnd, dogpile.EventMiss, dogpile.EventHit}; !slices.Equal(got, want) {
		t.Errorf("waiter events %v; want %v", got, want)
	}
	end, ctxOK := hr.find(dogpile.EventComputeEnd)
	if end.Took < 10*time.Millisecond || end.Err != nil || end.Key != "k" || end.Prefix != t.Name()+":" || !ctxOK {
		t.Errorf("compute end = %+v (start's context: %v); want Took >= 10ms, no error, key, prefix, the start's context", end, ctxOK)
	}
	wend, ctxOK := wr.find(dogpile.EventWaitEnd)
	if wend.Wake != dogpile.WakePush || wend.Took <= 0 || wend.Err != nil || !ctxOK {
		t.Errorf("wait end = %+v (start's context: %v); want a push wake-up, a duration, the start's context", wend, ctxOK)
	}
	if st := waiter.Stats(); st.Waits != 1 || st.Misses != 1 || st.Hits != 1 {
		t.Errorf("waiter Stats = %+v; want the events counted", st)
	}
}

// TestObserverFailedAndTakeover: a wait ends with WakeFailed when the
// holder's compute fails, and a compute error reaches ComputeEnd.
func TestObserverFailedCompute(t *testing.T) {
	s := redistest.StartServer(t)
	var hr, wr recorder
	holder := dogpile.New[int](s.Client(t), prefix(t), dogpile.WithObserver(hr.observe))
	waiter := dogpile.New[int](s.Client(t), prefix(t), dogpile.WithObserver(wr.observe))
	boom := errors.New("boom")
	release, hres, wres := holdAndWait(t, holder, waiter, t.Context(), "k", func(context.Context) (int, error) { return 0, boom })
	close(release)
	<-hres
	<-wres
	if e, _ := hr.find(dogpile.EventComputeEnd); !errors.Is(e.Err, boom) {
		t.Errorf("compute end error = %v; want compute's", e.Err)
	}
	if e, _ := wr.find(dogpile.EventWaitEnd); e.Wake != dogpile.WakeFailed || !errors.Is(e.Err, dogpile.ErrComputeFailed) {
		t.Errorf("wait end = %+v; want WakeFailed with ErrComputeFailed", e)
	}
	if st := waiter.Stats(); st.RemoteErrors != 1 {
		t.Errorf("waiter Stats = %+v; want one remote error", st)
	}
}

// TestFetchManyObserver: one compute call is one ComputeStart and one
// ComputeEnd, with every key in Keys; each key is a hit or a miss.
func TestFetchManyObserver(t *testing.T) {
	rec := &recorder{}
	c := dogpile.New[string](redistest.StartServer(t).Client(t), prefix(t), dogpile.WithObserver(rec.observe))
	require.NoError(t, c.Set(t.Context(), "hit", "v:hit", time.Minute))
	_, err := c.FetchMany(t.Context(), []string{"hit", "a", "b"}, time.Minute, (&echo{}).compute)
	require.NoError(t, err)
	kinds := rec.kinds()
	count := func(k dogpile.EventKind) int {
		return len(slices.DeleteFunc(slices.Clone(kinds), func(x dogpile.EventKind) bool { return x != k }))
	}
	if count(dogpile.EventComputeStart) != 1 || count(dogpile.EventComputeEnd) != 1 || count(dogpile.EventHit) != 1 || count(dogpile.EventMiss) != 2 {
		t.Errorf("events %v; want 1 compute start and end, 1 hit, 2 misses", kinds)
	}
	if e, ok := rec.find(dogpile.EventComputeEnd); !ok || !slices.Equal(e.Keys, []string{"a", "b"}) || e.Key != "a" {
		t.Errorf("ComputeEnd = %+v; want Keys [a b], Key a", e)
	}
}

// TestLogger: rare events are logged (a compute's panic with its stack,
// bytes that do not decode, an outage), hits and misses are not.
func TestLogger(t *testing.T) {
	s := redistest.StartServer(t)
	var buf redistest.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	rdb := s.NoRetryClient(t)
	c := dogpile.New[int](rdb, prefix(t), dogpile.WithLogger(logger))
	if _, err := c.Fetch(t.Context(), "p", time.Minute, func(context.Context) (int, error) { panic("kaboom") }); err == nil {
		t.Fatal("Fetch of a panicking compute: no error")
	}
	require.NoError(t, rdb.Set(t.Context(), dogpile.KeysOf(c, "bad").Value, "garbage", time.Minute).Err())
	c.Fetch(t.Context(), "bad", time.Minute, func(context.Context) (int, error) { return 1, nil })
	for range 10 {
		c.Fetch(t.Context(), "bad", time.Minute, redistest.NoCompute[int]) // hits: not logged
	}
	s.Kill()
	c.Get(t.Context(), "x") // its refused dial makes the breaker find the server down
	redistest.Eventually(t, "the outage logged", func() bool { return strings.Contains(buf.String(), "redis unreachable") })
	c.Get(t.Context(), "x")

	out := buf.String()
	for _, want := range []string{"compute panicked", "kaboom", "observe_test.go", "does not decode", "redis unreachable"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 3 {
		t.Errorf("%d log lines; want 3 (panic, decode error, outage):\n%s", n, out)
	}
}
