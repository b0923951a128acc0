package dogpile

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// failExtensions makes rdb fail the extensions of compute locks whose
// numbers (counted from 1) are in fail, without sending them.
func failExtensions(rdb redis.UniversalClient, fail ...int64) *atomic.Int64 {
	var n atomic.Int64
	rdb.AddHook(redistest.Hook{Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if runs(cmd, extendScript) {
			i := n.Add(1)
			for _, f := range fail {
				if i == f {
					err := errors.New("injected: connection reset")
					cmd.SetErr(err)
					return err
				}
			}
		}
		return next(ctx, cmd)
	}})
	return &n
}

// TestComputeLeaseRidesOutFailedExtensions: the compute lock's lease
// retries a failed extension with backoff, as a lock lease does, so two and
// then three failed extensions in a row within one lease neither cancel the
// compute nor let another process take over: one compute in the fleet, its
// value stored (issue 21: the cache's own renewer waited for the next tick
// and lost the lease after two failures).
func TestComputeLeaseRidesOutFailedExtensions(t *testing.T) {
	redistest.ForEachBackend(t, func(t *testing.T, b redistest.Backend) {
		clients := b.Clients(t, 2)
		opts := []Option{prefix(t), WithLease(300 * time.Millisecond)}
		holder, waiter := New[string](clients[0], opts...), New[string](clients[1], opts...)
		extensions := failExtensions(clients[0], 1, 2, 4, 5, 6)
		var computes atomic.Int64
		computing := make(chan struct{})
		var once sync.Once
		held := make(chan error, 1)
		go func() {
			v, err := holder.Fetch(t.Context(), "k", time.Minute, func(ctx context.Context) (string, error) {
				computes.Add(1)
				once.Do(func() { close(computing) }) // once: a lost lease restarts compute
				// Four leases, each with failed extensions for all it knows.
				select {
				case <-time.After(1200 * time.Millisecond):
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
				return "held", nil
			})
			if err == nil && v != "held" {
				err = errors.New("holder got " + v)
			}
			held <- err
		}()
		<-computing
		v, err := waiter.Fetch(t.Context(), "k", time.Minute, func(context.Context) (string, error) {
			computes.Add(1)
			return "taken over", nil
		})
		if err != nil || v != "held" {
			t.Errorf("waiter's Fetch = %q, %v; want held", v, err)
		}
		if err := <-held; err != nil {
			t.Errorf("holder's Fetch: %v; want its compute to run to the end", err)
		}
		if n := computes.Load(); n != 1 {
			t.Errorf("%d computes; want 1", n)
		}
		if got, err := waiter.Get(t.Context(), "k"); err != nil || got != "held" {
			t.Errorf("Get = %q, %v; want held", got, err)
		}
		if n := extensions.Load(); n < 7 {
			t.Errorf("%d extensions; want at least 7 (5 of them failed)", n)
		}
	})
}

// runs reports whether cmd runs s (EVALSHA, or EVAL of its source).
func runs(cmd redis.Cmder, s *redis.Script) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	src, _ := a[1].(string)
	switch cmd.Name() {
	case "evalsha":
		return src == s.Hash()
	case "eval":
		return sha1hex([]byte(src)) == s.Hash()
	}
	return false
}
