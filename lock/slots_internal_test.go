package lock

import (
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Every key and channel of one lock lands in one cluster slot, so that
// one script may touch them all.

func TestMutexKeysShareOneSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	for _, name := range []string{"a", "}", "{", "x{y}z", "{}", "orders:42"} {
		m := NewMutex(rdb, name)
		var slots []int64
		for _, k := range []string{m.lock, m.fence, m.channel} {
			slots = append(slots, rdb.ClusterKeySlot(t.Context(), k).Val())
		}
		if slots[0] != slots[1] || slots[0] != slots[2] {
			t.Errorf("%q: keys %s %s %s in slots %v; want one slot", name, m.lock, m.fence, m.channel, slots)
		}
	}
}

func TestKeySlotMatchesRedis(t *testing.T) {
	t.Parallel() // forming a cluster is mostly waiting
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	for _, k := range []string{"a", "b", "c", "dogpile:mutex:{a}", "x{}y", "{", "}{a}", "foo{bar}{baz}", "ünï", "123456789"} {
		if want := rdb.ClusterKeySlot(t.Context(), k).Val(); int64(redisutil.Slot(k)) != want {
			t.Errorf("Slot(%q) = %d; want %d", k, redisutil.Slot(k), want)
		}
	}
	twin := "a"
	for i := 0; redisutil.Slot(twin) != redisutil.Slot("a") || twin == "a"; i++ {
		twin = fmt.Sprint("n", i)
	}
	mm := NewMultiMutex(rdb, []string{"c", "b", "a", twin})
	if len(mm.groups) != 3 {
		t.Errorf("groups = %v for names %v; want 3 (a and %s share a slot)", mm.groups, mm.names, twin)
	}
	l, err := mm.Lock(t.Context()) // three scripts, one with two names
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestEveryPrimitiveKeysShareOneSlot(t *testing.T) {
	t.Parallel() // forming a cluster is mostly waiting
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	ctx := t.Context()
	for _, name := range []string{"a", "}", "x{y}z", "orders:42"} {
		s := NewSemaphore(rdb, name, 3)
		rw := NewRWMutex(rdb, name)
		r := NewRedlock([]redis.UniversalClient{rdb}, name)
		for _, keys := range [][]string{
			append(slices.Clone(s.keys), s.prefix+"token"),
			append(slices.Clone(rw.keys), rw.rd, rw.wr),
			NewMutex(rdb, name, WithFair()).fair.keys,
			r.keys,
		} {
			want := rdb.ClusterKeySlot(ctx, keys[0]).Val()
			for _, k := range keys[1:] {
				if got := rdb.ClusterKeySlot(ctx, k).Val(); got != want {
					t.Errorf("%q: %s in slot %d, %s in %d; want one slot", name, keys[0], want, k, got)
				}
			}
		}
	}
	// And the scripts run there: every primitive once on the cluster.
	l, err := NewRWMutex(rdb, "x{y}z").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l.Unlock(ctx)
}
