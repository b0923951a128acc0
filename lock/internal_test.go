package lock

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/redis/go-redis/v9"
)

func TestAcquireRetryIsIdempotent(t *testing.T) {
	// go-redis resends a script whose reply was lost. The resent acquire
	// must see its own token as success, with a new, larger fence (the
	// lost reply's never reached the caller), not as busy.
	rdb := redistest.Start(t)
	m := NewMutex(rdb, "retried")
	keys := []string{m.lock, m.fence}
	first, err := mutexAcquire.Run(t.Context(), rdb, keys, "tok:", 1000, 0, "", 60000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	again, err := mutexAcquire.Run(t.Context(), rdb, keys, "tok:", 1000, 0, "", 60000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 || again <= first {
		t.Errorf("acquire = %v, retry = %v; want a fence, then a larger one", first, again)
	}
	other, err := mutexAcquire.Run(t.Context(), rdb, keys, "other:", 1000, 0, "", 60000).Result()
	var ticket int64
	if r := acquireReply(other, err, &ticket); r.granted || r.v <= 0 || r.v > 1000 || ticket <= again {
		t.Errorf("another owner's acquire = %v, %v; want busy with the holder's PTTL and a ticket", other, err)
	}
}

// TestShortAcquireAndRelease: the common call's two-argument acquire is
// idempotent too; it sets the value "token:" and restarts a new counter
// from the server's clock. A release finds the lock ours by its exact
// value, by its value with a waiter's mark after it (then reserving it for
// that ticket), or with a fence after the colon (a MultiMutex's value).
func TestShortAcquireAndRelease(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	m := NewMutex(rdb, "short")
	keys := []string{m.lock, m.fence}
	first, err := mutexAcquire.Run(ctx, rdb, keys, "tok:", 1000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if first < 1e15 || rdb.Get(ctx, m.lock).Val() != "tok:" || rdb.PTTL(ctx, m.fence).Val() <= 0 {
		t.Fatalf("short acquire = %v, value %q, counter's PTTL %v; want a fence from the clock, value \"tok:\", a counter that expires",
			first, rdb.Get(ctx, m.lock).Val(), rdb.PTTL(ctx, m.fence).Val())
	}
	if again, err := mutexAcquire.Run(ctx, rdb, keys, "tok:", 1000).Int64(); err != nil || again <= first {
		t.Fatalf("short acquire = %v, retry = %v, %v; want a larger fence", first, again, err)
	}
	if ok, err := m.release(ctx, "to"); ok || err != nil {
		t.Errorf("release by a token's prefix = %v, %v; want not held", ok, err)
	}
	if ok, err := m.release(ctx, "tok"); !ok || err != nil || rdb.Exists(ctx, m.lock).Val() != 0 {
		t.Errorf("release by exact value = %v, %v; want released, key gone", ok, err)
	}
	rdb.Set(ctx, m.lock, "tok:+7", time.Second)
	if ok, err := m.release(ctx, "tok"); !ok || err != nil || rdb.Get(ctx, m.lock).Val() != "~7" {
		t.Errorf("release of a marked lock = %v, %v, value %q; want released and reserved for ticket 7", ok, err, rdb.Get(ctx, m.lock).Val())
	}
	rdb.Set(ctx, m.lock, fmt.Sprintf("tok:%d", first), time.Second)
	if ok, err := m.release(ctx, "tok"); !ok || err != nil || rdb.Exists(ctx, m.lock).Val() != 0 {
		t.Errorf("release of a value with a fence = %v, %v; want released", ok, err)
	}
}

func TestKeysShareOneSlot(t *testing.T) {
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

func TestNewKeysShareOneSlot(t *testing.T) {
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

// TestFairAcquireRetryIsIdempotent: the same for a fair mutex's (a
// semaphore's) acquire, whose fences are large numbers (server time in
// microseconds) that must survive being stored in Lua strings.
func TestFairAcquireRetryIsIdempotent(t *testing.T) {
	rdb := redistest.Start(t)
	m := NewMutex(rdb, "retried", WithFair())
	s := m.fair
	run := func() []int64 {
		res, err := semAcquire.Run(t.Context(), rdb, s.keys, "tok", 1, 1, 1000, "wait", s.prefix, s.publish, 60000, s.fairArg).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, again := run(), run()
	if first[0] != 1 || again[0] != 1 || first[1] != again[1] || first[1] < 1e15 {
		t.Errorf("acquire = %v, retry = %v; want both {1, same fence from the server clock}", first, again)
	}
	if v := rdb.Get(t.Context(), m.lock).Val(); v != fmt.Sprint("tok:", first[1]) {
		t.Errorf("plain key = %q; want tok:%d (a fair grant holds it too)", v, first[1])
	}
}
