package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestNotFoundIsItsOwnOutcome: with WithStale and WithNegativeTTL, a
// compute that finds nothing answers the caller that computed with
// compute's own error, other processes with ErrNotFound, and the cached
// tombstone answers later calls; none of it counts as a compute error, a
// remote error or a stale hit, and every answer counts in Stats.NotFound
// and is reported with Event.NotFound (issue 20: a tombstone was a stale
// hit, a 404 a compute error, and the computing caller lost its error).
func TestNotFoundIsItsOwnOutcome(t *testing.T) {
	s := redistest.StartServer(t)
	var mu sync.Mutex
	var events []dogpile.Event
	observe := dogpile.WithObserver(func(ctx context.Context, e dogpile.Event) context.Context {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
		return ctx
	})
	opts := []dogpile.Option{prefix(t), dogpile.WithStale(10 * time.Minute), dogpile.WithNegativeTTL(30 * time.Second), observe}
	holder, waiter := dogpile.New[int](s.Client(t), opts...), dogpile.New[int](s.Client(t), opts...)
	errMine := errors.New("no such row")
	computing, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := holder.Fetch(t.Context(), "404", time.Minute, func(context.Context) (int, error) {
			close(computing)
			<-release
			return 0, fmt.Errorf("row 404: %w (%w)", dogpile.ErrNotFound, errMine)
		})
		held <- err
	}()
	<-computing
	dogpile.OnWait(waiter, func(string) { close(release) })
	_, err := waiter.Fetch(t.Context(), "404", time.Minute, redistest.NoCompute[int])
	assert.ErrorIs(t, err, dogpile.ErrNotFound, "the waiting process's Fetch; want ErrNotFound")
	err = <-held
	assert.ErrorIs(t, err, dogpile.ErrNotFound, "the computing Fetch; want compute's own error, matching ErrNotFound")
	assert.ErrorIs(t, err, errMine, "the computing Fetch; want compute's own error, matching ErrNotFound")
	_, err = holder.Fetch(t.Context(), "404", time.Minute, redistest.NoCompute[int])
	assert.ErrorIs(t, err, dogpile.ErrNotFound, "Fetch of the tombstone; want ErrNotFound")
	h, w := holder.Stats(), waiter.Stats()
	if h.NotFound != 2 || h.Stale != 0 || h.ComputeErrors != 0 || h.Hits != 1 || h.Misses != 1 {
		t.Errorf("computing process: %+v; want NotFound 2 (a miss, a hit), no stale hit, no compute error", h)
	}
	if w.NotFound != 1 || w.RemoteErrors != 0 {
		t.Errorf("waiting process: %+v; want NotFound 1, no remote error", w)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range events {
		switch e.Kind {
		case dogpile.EventHit, dogpile.EventMiss, dogpile.EventComputeEnd, dogpile.EventWaitEnd:
			if !e.NotFound || e.Stale {
				t.Errorf("event %+v; want NotFound, not Stale", e)
			}
		}
	}
}

// unencodable is a value msgpack cannot encode.
type unencodable struct{ C chan int }

// TestUnstoredValueReturned: a computed value that cannot be stored (it
// does not encode, or is above WithMaxValueSize) is returned to Fetch's
// callers with the error, as Fetch documents (issue 20: a zero value came
// back), and nothing is stored; Set of a value above the limit fails fast
// with an error naming its size, matching ErrInvalid.
func TestUnstoredValueReturned(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	ch := make(chan int)
	c := dogpile.New[unencodable](rdb, prefix(t))
	v, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (unencodable, error) { return unencodable{ch}, nil })
	if err == nil || !strings.Contains(err.Error(), "encode") || v.C != ch {
		t.Errorf("Fetch of an unencodable value = %v, %v; want the value and an encode error", v, err)
	}
	big := dogpile.New[string](rdb, prefix(t), dogpile.WithMaxValueSize(1000))
	long := strings.Repeat("x", 2000)
	err = big.Set(ctx, "k", long, time.Minute)
	if !errors.Is(err, dogpile.ErrInvalid) || !strings.Contains(err.Error(), "above the limit of 1000") || strings.Count(err.Error(), "dogpile:") != 1 {
		t.Errorf("Set of 2000 bytes = %v; want ErrInvalid naming the size and the limit, with one prefix", err)
	}
	s, err := big.Fetch(ctx, "k", time.Minute, func(context.Context) (string, error) { return long, nil })
	assert.ErrorIs(t, err, dogpile.ErrInvalid, "Fetch of a value above the limit; want the value and ErrInvalid")
	assert.True(t, s == long, "Fetch of a value above the limit = %d bytes; want the value and ErrInvalid", len(s))
	_, err = big.Get(ctx, "k")
	assert.ErrorIs(t, err, dogpile.ErrMiss, "Get after it; want ErrMiss (nothing stored)")
}
