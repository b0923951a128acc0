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
)

// tagBackends runs f on every deployment: a server and a failover client,
// where one script checks and adds a value's tags, and a cluster and a
// ring, where a tag's keys and its values live on different nodes. The
// deployments run in parallel: the tag tests touch only their own keys.
func tagBackends(t *testing.T, f func(t *testing.T, b redistest.Backend)) {
	redistest.ForEachBackendParallel(t, f)
}

// tagged computes v for key, tagged with tags.
func tagged(v string, tags ...string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		Tag(ctx, tags...)
		return v, nil
	}
}

// TestInvalidateTag: InvalidateTag of a tag makes every value tagged with it
// (by Tag in Fetch and FetchMany computes, or by SetTagged), on every node,
// a miss, in this process and in another one's near tier, and leaves other
// values alone; with WithStale it makes them stale instead. Every key of
// the tags' bookkeeping has a TTL.
func TestInvalidateTag(t *testing.T) {
	t.Parallel() // its own deployments and hooks on its own clients; no package state
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		for _, stale := range []time.Duration{0, time.Minute} {
			t.Run(fmt.Sprint("stale=", stale), func(t *testing.T) {
				testInvalidateTag(t, b, stale)
			})
		}
	})
}

func testInvalidateTag(t *testing.T, b redistest.Backend, stale time.Duration) {
	clients := b.Clients(t, 2)
	ctx := t.Context()
	opts := []Option{prefix(t)}
	if stale > 0 {
		opts = append(opts, WithStale(stale))
	}
	c := New[string](clients[0], opts...)
	near := b.Name == "server" || b.Name == "cluster" // where the near tier works
	other := New[string](clients[1], opts...)
	if near {
		other = newNearCache[string](t, clients[1], 100, opts...)
	}
	const n = 40
	for i := range n {
		tag := []string{"even", "odd"}[i%2]
		key := fmt.Sprint("k", i)
		var err error
		if i < n/2 {
			_, err = c.Fetch(ctx, key, time.Minute, tagged("v", tag, "all"))
		} else {
			err = c.SetTagged(ctx, key, "v", time.Minute, tag, "all")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.FetchMany(ctx, []string{"m1", "m2"}, time.Minute, func(ctx context.Context, keys []string) (map[string]string, error) {
		Tag(ctx, "even")
		return map[string]string{"m1": "v", "m2": "v"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if near {
		fetchNear(t, other, "k0") // "even"
	}
	if err := c.InvalidateTag(ctx, "even"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key := fmt.Sprint("k", i)
		pttl, err := clients[0].PTTL(ctx, c.valueKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		invalidated := pttl < 0 || stale > 0 && pttl <= stale
		if want := i%2 == 0; invalidated != want {
			t.Errorf("%s (%s) after InvalidateTag(even): PTTL %v", key, []string{"even", "odd"}[i%2], pttl)
		}
	}
	for _, k := range []string{"m1", "m2"} {
		if pttl, _ := clients[0].PTTL(ctx, c.valueKey(k)).Result(); pttl > stale {
			t.Errorf("FetchMany's %s, tagged even, still fresh after InvalidateTag (PTTL %v)", k, pttl)
		}
	}
	redistest.Eventually(t, "the other process's near tier to drop k0", func() bool {
		v, err := other.Fetch(ctx, "k0", time.Minute, redistest.Constant("recomputed"))
		return err == nil && (v == "recomputed" || stale > 0)
	})
	assertTagKeysExpire(t, clients[0], c)
}

// assertTagKeysExpire fails if a key of c's tags has no TTL.
func assertTagKeysExpire(t *testing.T, rdb redis.UniversalClient, c *Cache[string]) {
	t.Helper()
	check := func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, c.opts.prefix+"tag*").Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			if pttl, err := n.PTTL(ctx, k).Result(); err != nil || pttl < 0 {
				return fmt.Errorf("tag key %s has no TTL (%v, %v)", k, pttl, err)
			}
		}
		return nil
	}
	if err := redisutil.ForEachNode(t.Context(), rdb, check); err != nil {
		t.Error(err)
	}
}

// TestTagRacesInvalidation: a compute that tagged its value before an
// InvalidateTag began, and stores it after InvalidateTag returned, does not
// leave it served: its store is refused, on a cluster and a ring too (the
// tags go first there), and its flight computes again; the value computed
// after the InvalidateTag is kept, and is what the flight's callers get.
func TestTagRacesInvalidation(t *testing.T) {
	t.Parallel() // its own deployments and hooks on its own clients; no package state
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := t.Context()
		c := New[string](rdb, prefix(t))
		taggedCh, release := make(chan struct{}), make(chan struct{})
		var calls atomic.Int32
		done := make(chan error, 1)
		go func() {
			v, err := c.Fetch(ctx, "k", time.Minute, func(ctx context.Context) (string, error) {
				Tag(ctx, "T")
				if calls.Add(1) > 1 {
					return "new", nil // the data read again, after the invalidation
				}
				close(taggedCh)
				<-release // the data is read here, before the invalidation
				return "old", nil
			})
			if err == nil && v != "new" {
				err = errors.New("the compute's own caller got " + v)
			}
			done <- err
		}()
		<-taggedCh
		if err := c.InvalidateTag(ctx, "T"); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, "k"); err != nil || v != "new" {
			t.Errorf("Get after the overtaken store = %q, %v; want new, computed again and kept", v, err)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("%d computes; want 2 (the overtaken one, then one after the InvalidateTag)", n)
		}
	})
}

// TestTagWithoutEpochs: when Tag cannot read its tags' epochs, the value
// is returned to its callers but not kept: the cache cannot vouch for it.
func TestTagWithoutEpochs(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	c := New[string](rdb, prefix(t))
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		for _, cmd := range cmds {
			if a := cmd.Args(); cmd.Name() == "get" && strings.Contains(fmt.Sprint(a[1]), "tagv:") {
				err := errors.New("injected")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmds)
	}})
	if v, err := c.Fetch(t.Context(), "k", time.Minute, tagged("v", "T")); err != nil || v != "v" {
		t.Fatalf("Fetch = %q, %v; want v", v, err)
	}
	if _, err := c.Get(t.Context(), "k"); !errors.Is(err, ErrMiss) {
		t.Errorf("Get = %v; want ErrMiss: a value whose tags could not be read is not kept", err)
	}
}

// TestInvalidateTagFailsMidway: when a batch of InvalidateTag fails, the
// values not yet voided stay aside, with a TTL (no bookkeeping key is left
// without one), and the next InvalidateTag voids them and leaves nothing
// aside.
func TestInvalidateTagFailsMidway(t *testing.T) {
	t.Parallel() // its own deployments and hooks on its own clients; no package state
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := t.Context()
		c := New[string](rdb, prefix(t))
		const n = 3 * keyspace.TagBatch
		for i := range n {
			if err := c.SetTagged(ctx, fmt.Sprint("k", i), "v", time.Minute, "T"); err != nil {
				t.Fatal(err)
			}
		}
		var voids atomic.Int32
		failing := atomic.Bool{}
		failing.Store(true)
		rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			if a := cmds[0].Args(); failing.Load() && len(a) > 1 && a[1] == script.Void.Hash() {
				if voids.Add(1) == 2 {
					err := errors.New("injected")
					for _, cmd := range cmds {
						cmd.SetErr(err)
					}
					return err
				}
			}
			return next(ctx, cmds)
		}})
		// The first use of script.Void is sent as EVAL, with its body.
		script.Void.Load(ctx, rdb)
		if err := c.InvalidateTag(ctx, "T"); err == nil {
			t.Fatal("InvalidateTag with a failing batch = nil; want its error")
		}
		assertTagKeysExpire(t, rdb, c)
		left := 0
		for i := range n {
			if _, err := c.Get(ctx, fmt.Sprint("k", i)); err == nil {
				left++
			}
		}
		if left == 0 || left == n {
			t.Fatalf("%d of %d values left after the failed batch; want some voided, some kept", left, n)
		}
		failing.Store(false)
		if err := c.InvalidateTag(ctx, "T"); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if v, err := c.Get(ctx, fmt.Sprint("k", i)); !errors.Is(err, ErrMiss) {
				t.Fatalf("k%d after the second InvalidateTag = %q, %v; want ErrMiss", i, v, err)
			}
		}
		assertTagKeysExpire(t, rdb, c)
		if err := redisutil.ForEachNode(ctx, rdb, func(ctx context.Context, n *redis.Client) error {
			if left, _ := n.Keys(ctx, c.opts.prefix+"tag*{T}*").Result(); len(left) > 1 { // the epoch stays
				return fmt.Errorf("tag keys left after a successful InvalidateTag: %v", left)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	})
}

// TestInvalidateTagConcurrent: an InvalidateTag of a tag that another
// InvalidateTag of it is still voiding does not return before every value
// is voided: it works through the other's set aside too. It returned at
// once, finding the tag's set empty (torture defect
// invalidate-concurrent).
func TestInvalidateTagConcurrent(t *testing.T) {
	t.Parallel() // its own deployments and hooks on its own clients; no package state
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := t.Context()
		c := New[string](rdb, prefix(t))
		const n = 2 * keyspace.TagBatch
		for i := range n {
			if err := c.SetTagged(ctx, fmt.Sprint("k", i), "v", time.Minute, "T"); err != nil {
				t.Fatal(err)
			}
		}
		slow := New[string](b.Client(t), prefix(t)) // the first InvalidateTag's process
		stalled := make(chan struct{})
		var once sync.Once
		slow.client.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			if a := cmds[0].Args(); len(a) > 1 && (a[1] == script.Void.Hash() || a[0] == "eval") {
				first := false
				once.Do(func() { first = true })
				if first {
					close(stalled)
					time.Sleep(500 * time.Millisecond) // its first batch is slow
				}
			}
			return next(ctx, cmds)
		}})
		firstDone := make(chan error, 1)
		go func() { firstDone <- slow.InvalidateTag(ctx, "T") }()
		<-stalled
		if err := c.InvalidateTag(ctx, "T"); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if v, err := c.Get(ctx, fmt.Sprint("k", i)); !errors.Is(err, ErrMiss) {
				t.Fatalf("k%d after the second InvalidateTag returned = %q, %v; want ErrMiss", i, v, err)
			}
		}
		if err := <-firstDone; err != nil {
			t.Fatal(err)
		}
	})
}

// TestTaggedHitCostsOneCommand: a hit on a tagged value is one GET, as on
// any value: tags are read only by computes and InvalidateTag.
func TestTaggedHitCostsOneCommand(t *testing.T) {
	t.Parallel() // its own deployments and hooks on its own clients; no package state
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		rdb := b.Client(t)
		ctx := t.Context()
		c := New[string](rdb, prefix(t))
		if _, err := c.Fetch(ctx, "k", time.Minute, tagged("v", "T", "U")); err != nil {
			t.Fatal(err)
		}
		var cmds []string
		var mu sync.Mutex
		count := func(cs ...redis.Cmder) {
			mu.Lock()
			defer mu.Unlock()
			for _, cmd := range cs {
				if !redistest.IsHandshake(cmd) {
					cmds = append(cmds, cmd.Name())
				}
			}
		}
		rdb.AddHook(redistest.Hook{
			Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				count(cmd)
				return next(ctx, cmd)
			},
			Pipeline: func(ctx context.Context, cs []redis.Cmder, next redis.ProcessPipelineHook) error {
				count(cs...)
				return next(ctx, cs)
			},
		})
		for range 10 {
			if v, err := c.Fetch(ctx, "k", time.Minute, tagged("other", "T")); err != nil || v != "v" {
				t.Fatalf("Fetch = %q, %v; want the tagged value", v, err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(cmds) != 10 || slices.ContainsFunc(cmds, func(n string) bool { return n != "get" }) {
			t.Errorf("10 hits on a tagged value sent %v; want 10 GETs", cmds)
		}
	})
}

// TestInvalidateTagDropsFlights: a Fetch that starts after InvalidateTag
// returned does not join this process's flight of a compute that tagged
// before it (its value will not be kept): it computes anew. It joined the
// flight and got the voided value (torture defect invalidate-flight).
func TestInvalidateTagDropsFlights(t *testing.T) {
	t.Parallel() // its own deployments and hooks on its own clients; no package state
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		ctx := t.Context()
		c := New[string](b.Client(t), prefix(t))
		taggedCh, release := make(chan struct{}), make(chan struct{})
		first := make(chan string, 1)
		var calls atomic.Int32
		go func() {
			v, _ := c.Fetch(ctx, "k", time.Minute, func(ctx context.Context) (string, error) {
				Tag(ctx, "T")
				if calls.Add(1) > 1 {
					return "new", nil // computed again after its store was overtaken
				}
				close(taggedCh)
				<-release
				return "old", nil
			})
			first <- v
		}()
		<-taggedCh
		if err := c.InvalidateTag(ctx, "T"); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(300*time.Millisecond, func() { close(release) })
		if v, err := c.Fetch(ctx, "k", time.Minute, tagged("new", "T")); err != nil || v != "new" {
			t.Errorf("Fetch after InvalidateTag = %q, %v; want new, not the voided flight's value", v, err)
		}
		<-first
	})
}

// TestInvalidateTagOtherProcessFlight: a call that joins a flight of its
// process after another process's InvalidateTag returned never gets the
// value of that flight's compute, tagged before the InvalidateTag: the
// store is refused as overtaken and the flight computes again, Fetch and
// FetchMany alike. It got the voided value (found by the torture run, seed
// 8597364446369899938).
func TestInvalidateTagOtherProcessFlight(t *testing.T) {
	tagBackends(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			name        string
			many, inSet bool // inSet: an earlier value put k in T's set, so the InvalidateTag takes the lock
		}{{"Fetch", false, false}, {"FetchMany", true, false}, {"FetchMany/in the set", true, true}, {"Fetch/in the set", false, true}} {
			many := tc.many
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				a := New[string](b.Client(t), prefix(t))
				other := New[string](b.Client(t), prefix(t))
				if tc.inSet {
					if err := other.SetTagged(ctx, "k", "before", time.Minute, "T"); err != nil {
						t.Fatal(err)
					}
					if err := other.Delete(ctx, "k"); err != nil { // a miss, still in T's set
						t.Fatal(err)
					}
				}
				taggedCh, release := make(chan struct{}), make(chan struct{})
				var calls atomic.Int32
				compute := func(ctx context.Context) (string, error) {
					Tag(ctx, "T")
					if calls.Add(1) > 1 {
						return "new", nil
					}
					close(taggedCh)
					<-release
					return "old", nil
				}
				fetch := func() (string, error) {
					if !many {
						return a.Fetch(ctx, "k", time.Minute, compute)
					}
					m, err := a.FetchMany(ctx, []string{"k"}, time.Minute, func(ctx context.Context, _ []string) (map[string]string, error) {
						v, err := compute(ctx)
						return map[string]string{"k": v}, err
					})
					return m["k"], err
				}
				first := make(chan string, 1)
				go func() { v, _ := fetch(); first <- v }()
				<-taggedCh
				if err := other.InvalidateTag(ctx, "T"); err != nil {
					t.Fatal(err)
				}
				second := make(chan string, 1)
				go func() { v, _ := a.Fetch(ctx, "k", time.Minute, compute); second <- v }()
				time.Sleep(50 * time.Millisecond) // the second Fetch joins the flight
				close(release)
				if v := <-second; v != "new" {
					t.Errorf("Fetch that began after the other process's InvalidateTag = %q; want new", v)
				}
				<-first
				if v, err := a.Get(ctx, "k"); err != nil || v != "new" {
					t.Errorf("Get = %q, %v; want new", v, err)
				}
			})
		}
	})
}

// TestSetTaggedRacesInvalidateTag: on a Cluster, where a tag's set and a
// value live on different nodes, a SetTagged whose value is slow to land
// while an InvalidateTag of its tag runs is still voided by the next
// InvalidateTag. Found by the torture run (seed 4874054713374990276): the
// key went into the set, the concurrent InvalidateTag moved the set aside
// and voided the value before it was stored, and the value then stayed
// out of every set, served after an InvalidateTag that began once the
// SetTagged had returned.
func TestSetTaggedRacesInvalidateTag(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := t.Context()
	other := New[string](cl.Client(t), prefix(t)) // another process
	set, key := offTagNode(t, other, "T")
	vk := other.valueKey(key)

	// The writer's client holds back the command that stores the value.
	held, release := make(chan struct{}), make(chan struct{})
	stores := func(cmds []redis.Cmder) bool {
		return slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			a := c.Args()
			return len(a) > 3 && (a[1] == script.Set.Hash() || a[0] == "eval") && a[3] == vk
		})
	}
	var once sync.Once // the first try only: an EVALSHA answered NOSCRIPT goes again as EVAL
	hold := func(cmds []redis.Cmder) {
		if stores(cmds) {
			once.Do(func() { close(held); <-release })
		}
	}
	wc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { wc.Close() })
	wc.OnNewNode(func(n *redis.Client) {
		n.AddHook(redistest.Hook{
			Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				hold([]redis.Cmder{cmd})
				return next(ctx, cmd)
			},
			Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
				hold(cmds)
				return next(ctx, cmds)
			},
		})
	})
	writer := New[string](wc, prefix(t))
	done := make(chan error, 1)
	go func() { done <- writer.SetTagged(ctx, key, "v", time.Minute, "T") }()
	<-held
	// A SetTagged that adds the key to the tag's set beside or before its
	// value (the defect) has done so by now; one that adds it after the
	// value has not, and this bounded look finds nothing: no assertion.
	redistest.Within(200*time.Millisecond, func() bool {
		in, _ := other.client.SIsMember(ctx, set, vk).Result()
		return in
	})
	if err := other.InvalidateTag(ctx, "T"); err != nil { // concurrent with the SetTagged
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := other.InvalidateTag(ctx, "T"); err != nil { // after it returned
		t.Fatal(err)
	}
	if v, err := other.Get(ctx, key); !errors.Is(err, ErrMiss) {
		t.Errorf("%s after an InvalidateTag that began once SetTagged returned = %q, %v; want ErrMiss", key, v, err)
	}
}

// offTagNode returns the set of tag and a key whose value lives on another
// node of c's Cluster than that set.
func offTagNode(t *testing.T, c *Cache[string], tag string) (set, key string) {
	t.Helper()
	cc := c.client.(*redis.ClusterClient)
	set, _ = c.space.TagKeys(tag)
	tagNode, err := cc.MasterForKey(t.Context(), set)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		n, err := cc.MasterForKey(t.Context(), c.valueKey(fmt.Sprint("k", i)))
		if err != nil {
			t.Fatal(err)
		}
		if n.Options().Addr != tagNode.Options().Addr {
			return set, fmt.Sprint("k", i)
		}
	}
}

// TestSetTaggedTagStepFails: on a Cluster, where SetTagged stores the
// value before adding it to its tags' sets, a failure of that second step
// undoes the value: SetTagged fails, and the key is not left in Redis
// outside every set, where no InvalidateTag would find it.
//
// "later": another process Sets the key between the value step and the
// failed tag step; the undo leaves that newer value alone.
func TestSetTaggedTagStepFails(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "later"}[later], func(t *testing.T) {
			testSetTaggedTagStepFails(t, later)
		})
	}
}

func testSetTaggedTagStepFails(t *testing.T, later bool) {
	cl := redistest.StartCluster(t, 3)
	ctx := t.Context()
	other := New[string](cl.Client(t), prefix(t))
	set, key := offTagNode(t, other, "T")
	vk := other.valueKey(key)
	injected := errors.New("injected: the tag's node is unreachable")
	has := func(cmds []redis.Cmder, arg string) bool {
		return slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return slices.Contains(c.Args(), any(arg)) })
	}
	var failed atomic.Bool
	undone := make(chan struct{}, 1)
	hook := func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
		if has(cmds, set) {
			if later {
				if err := other.Set(ctx, key, "later", time.Minute); err != nil {
					t.Error(err)
				}
			}
			failed.Store(true)
			return injected
		}
		err := next()
		if failed.Load() && has(cmds, vk) {
			undone <- struct{}{} // the undo, which runs after the failure
		}
		return err
	}
	wc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { wc.Close() })
	wc.OnNewNode(func(n *redis.Client) {
		n.AddHook(redistest.Hook{
			Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
				return hook(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
			},
			Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
				return hook(ctx, cmds, func() error { return next(ctx, cmds) })
			},
		})
	})
	writer := New[string](wc, prefix(t))
	if err := writer.SetTagged(ctx, key, "v", time.Minute, "T"); err == nil {
		t.Fatal("SetTagged succeeded though its tag step failed")
	}
	select {
	case <-undone:
	case <-time.After(redistest.EventuallyWithin):
		t.Fatal("no undo of the untagged value")
	}
	v, err := other.Get(ctx, key)
	switch {
	case later && (v != "later" || err != nil):
		t.Errorf("Get after the undo = %q, %v; want the later Set's value kept", v, err)
	case !later && !errors.Is(err, ErrMiss):
		t.Errorf("Get after the undo = %q, %v; want a miss: the untagged value undone", v, err)
	}
}
