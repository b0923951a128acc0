package dogpile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/script"
)

// failExtensions makes rdb fail the extensions of compute locks whose
// numbers (counted from 1) are in fail, without sending them.
func failExtensions(rdb redis.UniversalClient, fail ...int64) *atomic.Int64 {
	var n atomic.Int64
	rdb.AddHook(redistest.Hook{Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if runs(cmd, script.Extend) {
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
// and lost the lease after two failures). A 1.5 s lease: a failed
// extension is retried within milliseconds, so only a stall of the whole
// process can lose it, and at 600 ms one of 400 ms at load 28 did.
func TestComputeLeaseRidesOutFailedExtensions(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	redistest.ForEachBackendParallel(t, func(t *testing.T, b redistest.Backend) {
		clients := b.Clients(t, 2)
		// Each extension one EVALSHA: on a server that has not run the
		// script yet, its NOSCRIPT and the EVAL sent again would count as
		// two extensions, and fail one more than the test means to.
		LoadScripts(t, clients[0])
		opts := []Option{prefix(t), WithLease(1500 * time.Millisecond)}
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
				// Nine extensions: two failed, one, three failed, three.
				select {
				case <-time.After(2400 * time.Millisecond):
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
		return entry.SHA1([]byte(src)) == s.Hash()
	}
	return false
}

// TestNoComputeAfterStallPastLease: a process that stalls between taking
// the compute lock and calling compute, for longer than the lease (a GC
// pause, SIGSTOP, a starved CPU), does not call compute once it runs
// again: another process has taken over meanwhile. It answers with the
// other's value; one compute in the fleet (found by issue 24's torture
// run: a worker resumed after SIGCONT computed beside the process that had
// taken over). Fetch and FetchMany alike.
func TestNoComputeAfterStallPastLease(t *testing.T) {
	const lease = 150 * time.Millisecond
	for _, many := range []bool{false, true} {
		t.Run(map[bool]string{false: "Fetch", true: "FetchMany"}[many], func(t *testing.T) {
			s := redistest.StartServer(t)
			a := New[string](s.Client(t), prefix(t), WithLease(lease))
			b := New[string](s.Client(t), prefix(t), WithLease(lease))
			var computes atomic.Int32
			locked := make(chan struct{})
			var once sync.Once
			a.beforeCompute = func(string) {
				once.Do(func() { close(locked) })
				time.Sleep(3 * lease) // stalled: the lease runs out, b takes over
			}
			fetch := func(c *Cache[string], v string) (string, error) {
				compute := func(context.Context) (string, error) { computes.Add(1); return v, nil }
				if !many {
					return c.Fetch(t.Context(), "k", time.Minute, compute)
				}
				m, err := c.FetchMany(t.Context(), []string{"k"}, time.Minute, func(ctx context.Context, _ []string) (map[string]string, error) {
					v, err := compute(ctx)
					return map[string]string{"k": v}, err
				})
				return m["k"], err
			}
			got := make(chan string, 1)
			go func() {
				v, err := fetch(a, "a")
				if err != nil {
					v = err.Error()
				}
				got <- v
			}()
			<-locked
			if v, err := fetch(b, "b"); err != nil || v != "b" {
				t.Fatalf("the process that took over got %q, %v; want b", v, err)
			}
			if v := <-got; v != "b" {
				t.Errorf("the stalled process got %q; want b, the other's value", v)
			}
			if n := computes.Load(); n != 1 {
				t.Errorf("%d computes; want 1: the stalled process computed after its lease ran out", n)
			}
		})
	}
}

// TestTagReturnsWhenLeaseLost: with ContextTimeoutEnabled, as the package
// doc recommends, a compute that calls Tag while the server is frozen gets
// Tag's return when its lease may be lost (its context ends then too), not
// when go-redis gives up on the read, seconds later: a compute that lost
// its lock must be free to stop, for another process may be computing the
// key by then (a fault run of internal/torture found two computes of one
// key at once, the first held 0.7 s in Tag).
func TestTagReturnsWhenLeaseLost(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	c := New[string](rdb, prefix(t), WithLease(300*time.Millisecond))
	defer c.Close()
	computing, paused := make(chan struct{}), make(chan struct{})
	tagged := make(chan time.Duration, 1)
	var once sync.Once
	var cause error // set before Fetch returns
	fetched := make(chan error, 1)
	go func() {
		v, err := c.Fetch(t.Context(), "k", time.Minute, func(ctx context.Context) (string, error) {
			first := false
			once.Do(func() { first = true })
			if !first { // the lost lease's compute is over: the next one
				return "v", nil
			}
			close(computing)
			<-paused
			start := time.Now()
			Tag(ctx, "T")
			took := time.Since(start)
			// The lease's timer and the read's deadline fire together: the
			// server stays frozen until ctx has ended too (resumed before,
			// a renewal sent during the freeze could still be granted).
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
			cause = context.Cause(ctx)
			tagged <- took
			return "", cause
		})
		if err == nil && v != "v" {
			err = fmt.Errorf("value %q; want v from the compute after the lost lease", v)
		}
		fetched <- err
	}()
	<-computing
	srv.Pause() // here, not in compute: it skips the test where it cannot stop processes
	close(paused)
	var took time.Duration
	select {
	case took = <-tagged:
	case <-time.After(10 * time.Second):
	}
	srv.Resume()
	if err := <-fetched; err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if took == 0 || took > time.Second {
		t.Errorf("Tag returned %v after it was called (0: not within 10 s), its lease 300 ms; want it back when the lease may be lost", took)
	}
	if !errors.Is(cause, errLeaseLost) {
		t.Errorf("compute's context after Tag: cause %v; want errLeaseLost", cause)
	}
}

// TestTagReadsAgainAfterRenewal: a read of Tag's epochs cut at the lease's
// safe deadline, which a renewal has since moved, is sent again: the lease
// holds, so the value is kept, tagged (a cut read alone would leave it
// unkept: the cache could not vouch for its tags).
func TestTagReadsAgainAfterRenewal(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	var stalled, bounded atomic.Bool
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if a := cmds[0].Args(); cmds[0].Name() == "get" && strings.Contains(fmt.Sprint(a[1]), "tagv:") && !stalled.Swap(true) {
			d, ok := ctx.Deadline()
			bounded.Store(ok)
			time.Sleep(time.Until(d) + 50*time.Millisecond) // past the deadline it was given
		}
		return next(ctx, cmds)
	}})
	// A lease of a second, renewed every third: the renewals (not stalled)
	// keep it through the stall with room to spare on a loaded machine.
	c := New[string](rdb, prefix(t), WithLease(time.Second))
	defer c.Close()
	ctx := t.Context()
	if v, err := c.Fetch(ctx, "k", time.Minute, tagged("v", "T")); err != nil || v != "v" {
		t.Fatalf("Fetch = %q, %v; want v", v, err)
	}
	if !stalled.Load() || !bounded.Load() {
		t.Fatalf("the epochs' read: stalled %v, with a deadline %v; want both", stalled.Load(), bounded.Load())
	}
	if v, err := c.Get(ctx, "k"); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v; want v kept: the lease held, the read went again", v, err)
	}
	if err := c.InvalidateTag(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, ErrMiss) {
		t.Errorf("Get after InvalidateTag(T) = %v; want ErrMiss: the value kept its tag", err)
	}
}
