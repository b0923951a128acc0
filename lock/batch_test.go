package lock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// testOverlappingCallsShareRoundTrips: 16 goroutines of one client lock
// and unlock names of their own. Their calls overlap, and some share a
// pipeline; every one still gets its lease, with fences that increase per
// name, although the server's scripts are flushed meanwhile (a batch
// whose scripts are gone sends them again).
func testOverlappingCallsShareRoundTrips(t *testing.T, rdb redis.UniversalClient) {
	var p pipelines
	rdb.AddHook(redistest.Hook{Pipeline: p.count})
	ctx := t.Context()
	var wg, flusher sync.WaitGroup
	stop := make(chan struct{})
	defer flusher.Wait()
	defer close(stop)
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				rdb.ScriptFlush(ctx)
			}
		}
	})
	for g := range 16 {
		m := lock.NewMutex(rdb, fmt.Sprintf("overlap%d", g))
		wg.Go(func() {
			var last int64
			for range 50 {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if l.Fence() <= last {
					t.Errorf("fence %d after %d; want increasing", l.Fence(), last)
				}
				last = l.Fence()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p.shared.Load() == 0 {
		t.Errorf("no pipeline carried two calls (%d pipelines): 1600 overlapping calls never shared a round trip", p.sent.Load())
	}
	t.Logf("%d of 1600 calls went in %d pipelines", p.shared.Load(), p.sent.Load())
}

// pipelines counts the pipelines of scripts a client sends, and the
// scripts in those of two or more.
type pipelines struct{ sent, shared atomic.Int64 }

// count is a redistest.Hook's Pipeline.
func (p *pipelines) count(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	scripts := 0
	for _, c := range cmds {
		if c.Name() == "evalsha" {
			scripts++
		}
	}
	if scripts > 0 {
		p.sent.Add(1)
	}
	if scripts > 1 {
		p.shared.Add(int64(scripts))
	}
	return next(ctx, cmds)
}
