package dogpile

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	set, _ := other.tagKeys("T")
	tagNode, err := other.client.(*redis.ClusterClient).MasterForKey(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	key := ""
	for i := 0; key == ""; i++ { // a key whose value lives on another node than the tag's set
		n, err := other.client.(*redis.ClusterClient).MasterForKey(ctx, other.valueKey(fmt.Sprint("k", i)))
		if err != nil {
			t.Fatal(err)
		}
		if n.Options().Addr != tagNode.Options().Addr {
			key = fmt.Sprint("k", i)
		}
	}
	vk := other.valueKey(key)

	// The writer's client holds back the command that stores the value.
	held, release := make(chan struct{}), make(chan struct{})
	stores := func(cmds []redis.Cmder) bool {
		return slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			a := c.Args()
			return len(a) > 3 && (a[1] == setScript.Hash() || a[0] == "eval") && a[3] == vk
		})
	}
	hold := func(cmds []redis.Cmder) {
		if stores(cmds) {
			close(held)
			<-release
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
