package lock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/lock"
	"github.com/redis/go-redis/v9"
)

// testOverlappingCallsShareRoundTrips: 16 goroutines of one client lock
// and unlock names of their own. Their calls overlap, and some share a
// pipeline; every one still gets its lease, with fences that increase per
// name, although the server's scripts are flushed meanwhile (a batch
// whose scripts are gone sends them again).
func testOverlappingCallsShareRoundTrips(t *testing.T, rdb redis.UniversalClient) {
	var hook pipelines
	rdb.AddHook(&hook)
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
	if hook.shared.Load() == 0 {
		t.Errorf("no pipeline carried two calls (%d pipelines): 1600 overlapping calls never shared a round trip", hook.sent.Load())
	}
	t.Logf("%d of 1600 calls went in %d pipelines", hook.shared.Load(), hook.sent.Load())
}

// pipelines counts the pipelines of scripts a client sends, and the
// scripts in those of two or more.
type pipelines struct{ sent, shared atomic.Int64 }

func (*pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
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
}
