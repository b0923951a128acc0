package dogpile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

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
			return len(a) > 3 && (a[1] == setScript.Hash() || a[0] == "eval") && a[3] == vk
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
	set, _ = c.tagKeys(tag)
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
