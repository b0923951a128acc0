package dogpile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
	"github.com/dogpile-go/dogpile/lock"
)

// TestClear: Clear removes every value of the Cache's prefix on every node,
// voids a compute in progress (its store is fenced off), and leaves the
// keys of the lock package and of other prefixes alone. The deployments
// run in parallel: each Clear sees only its own.
func TestClear(t *testing.T) {
	t.Parallel() // its own deployments, each Clear sees only its own; no package state
	redistest.ForEachBackendParallel(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := t.Context()
		c := New[int](rdb) // the default prefix, which the lock package's keys share
		other := New[int](rdb, prefix(t))
		const n = 300
		for i := range n {
			if err := c.Set(ctx, fmt.Sprint(t.Name(), i), i, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if err := other.Set(ctx, "kept", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
		held, err := lock.NewMutex(rdb, t.Name()).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Unlock(context.Background())
		computing, release := make(chan struct{}), make(chan struct{})
		late := make(chan error, 1)
		var calls atomic.Int32
		go func() {
			v, err := c.Fetch(ctx, "slow", time.Minute, func(context.Context) (int, error) {
				if calls.Add(1) > 1 {
					return 8, nil // computed again once the first store was refused
				}
				close(computing)
				<-release
				return 7, nil
			})
			if err == nil && v != 8 {
				err = fmt.Errorf("the Fetch computing during Clear = %d; want 8, computed after it", v)
			}
			late <- err
		}()
		<-computing
		if err := c.Clear(ctx); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-late; err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := c.Get(ctx, fmt.Sprint(t.Name(), i)); !errors.Is(err, ErrMiss) {
				t.Fatalf("Get after Clear = %v; want ErrMiss", err)
			}
		}
		if v, err := c.Get(ctx, "slow"); err != nil || v != 8 {
			t.Errorf("Get of the key computed during Clear = %d, %v; want 8: the compute in progress stored nothing, the one after it did", v, err)
		}
		if v, err := other.Get(ctx, "kept"); err != nil || v != 1 {
			t.Errorf("another prefix's value after Clear = %v, %v", v, err)
		}
		if ok, err := lock.NewMutex(rdb, t.Name()).Locked(ctx); err != nil || !ok {
			t.Errorf("a held mutex after Clear: Locked = %v, %v; want held", ok, err)
		}
	})
}

// TestClearNearTiers: after Clear, no process's near tier serves a value
// it held: this one drops them at once, others as Redis reports each
// deletion.
func TestClearNearTiers(t *testing.T) {
	s := redistest.StartServer(t)
	a := newNearCache[string](t, s.Client(t), 100)
	b := newNearCache[string](t, s.Client(t), 100)
	ctx := t.Context()
	if err := a.Set(ctx, "k", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	fetchNear(t, a, "k")
	fetchNear(t, b, "k")
	if err := a.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("new")); err != nil || v != "new" {
		t.Errorf("Fetch after Clear in the clearing process = %q, %v; want new", v, err)
	}
	redistest.Eventually(t, "the other process's tier to drop k", func() bool {
		v, err := b.Fetch(ctx, "k", time.Minute, redistest.Constant("new"))
		return err == nil && v == "new"
	})
}

// TestClearRemovesWhatItWrote: Clear removes every key the Cache wrote,
// values and the records of each key (a lock left by a holder that
// vanished, failed computes' errors, the retry mark) and the tags'
// bookkeeping (sets, epochs, a set an InvalidateTag moved aside and left
// with its registry), and nothing else: not a key under its prefix of
// another shape, nor one of another prefix or none. Before, it left the
// tags' keys. On a server and on a Cluster.
func TestClearRemovesWhatItWrote(t *testing.T) {
	for _, name := range []string{"server", "cluster"} {
		t.Run(name, func(t *testing.T) {
			var rdb redis.UniversalClient
			if name == "server" {
				rdb = redistest.StartServer(t).Client(t)
			} else {
				rdb = redistest.StartCluster(t, 3).Client(t)
			}
			ctx := t.Context()
			c := New[string](rdb, WithPrefix("p:"), WithStale(time.Minute))
			defer c.Close()
			writeEveryKindOfKey(t, c)
			foreign := []string{"{someone}else", "{k}", "q:{k}", "p:{k}x", "p:{k}:lockx", "p:{}", "p:{k}#", "p:plain",
				"p:tag:plain", "p:tagv:{t}:x", "p:tag:{t}:short", "p:tagz:{t}"}
			for _, k := range foreign {
				if err := rdb.Set(ctx, k, "foreign", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Clear(ctx); err != nil {
				t.Fatal(err)
			}
			left := slices.DeleteFunc(allKeys(t, rdb), func(k string) bool {
				return strings.HasPrefix(k, "p:clock-probe:") // WithStale's, of a few ms (see Clear)
			})
			slices.Sort(left)
			slices.Sort(foreign)
			if !slices.Equal(left, foreign) {
				t.Errorf("keys after Clear:\n%q\nwant the foreign ones:\n%q", left, foreign)
			}
		})
	}
}

// writeEveryKindOfKey makes c write every kind of key it has, and checks
// that it did: values (a key with a brace among them), a failed compute's
// errors and retry mark, a lock left by a holder that vanished, tags' sets
// and epochs, and a set aside that an InvalidateTag left before voiding
// its values, with its registry.
func writeEveryKindOfKey(t *testing.T, c *Cache[string]) {
	t.Helper()
	ctx := t.Context()
	for _, k := range []string{"a", "{brace}"} {
		if err := c.SetTagged(ctx, k, "v", time.Minute, "t", "w", "{u}"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.InvalidateTag(ctx, "{u}"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "fails", time.Minute, func(context.Context) (string, error) {
		return "", errors.New("backend down")
	}); err == nil {
		t.Fatal("the failing compute returned no error")
	}
	if err := c.client.Set(ctx, c.keys("dead").Lock, "token", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	set, epoch := c.space.TagKeys("t")
	registry := c.opts.prefix + "tagx:" + redisutil.Tag("t")
	aside := set + ":" + redisutil.Token()
	if err := script.TagBump.Run(ctx, c.client, []string{epoch, set, registry, aside}, redisutil.Millis(keyspace.EpochLife)).Err(); err != nil {
		t.Fatal(err)
	}
	written := allKeys(t, c.client)
	for _, k := range []string{c.valueKey("a"), c.valueKey("{brace}"), c.keys("fails").Errs, c.keys("fails").Throttle,
		c.keys("dead").Lock, c.opts.prefix + "tag:{w}", epoch, c.opts.prefix + "tagv:" + redisutil.Tag("{u}"), registry, aside} {
		if !slices.Contains(written, k) {
			t.Fatalf("%s not written; the keys are %q", k, written)
		}
	}
}

// allKeys lists the keys of every node of rdb.
func allKeys(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	var mu sync.Mutex
	var all []string
	err := redisutil.ForEachNode(t.Context(), rdb, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		all = append(all, keys...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}
