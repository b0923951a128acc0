package wake

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestCloseDoesNotWaitForRedis: waiters that give up while Redis is frozen
// leave at once: their unsubscribes must not keep them (or each other)
// waiting for the server.
func TestCloseDoesNotWaitForRedis(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	var subs []*Sub
	for i := range 10 {
		sub, err := Subscribe(t.Context(), rdb, fmt.Sprint("pause", i))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	// A client with no subscription connection yet: the first waiter must
	// dial and set one up on the frozen server.
	fresh := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = fresh.Close() })
	s.Pause()
	defer s.Resume()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	for _, c := range []*redis.Client{rdb, fresh} {
		for i := range 10 {
			wg.Go(func() {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				if sub, err := Subscribe(ctx, c, fmt.Sprint("new", i)); err == nil {
					sub.Close()
				}
				mu.Lock()
				worst = max(worst, time.Since(start))
				mu.Unlock()
			})
		}
	}
	for _, sub := range subs {
		wg.Go(sub.Close)
	}
	wg.Wait()
	if worst > 500*time.Millisecond {
		t.Errorf("a waiter with a 50ms deadline took %v to give up on a frozen server; want about its deadline", worst)
	}
}
