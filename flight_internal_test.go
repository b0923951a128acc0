package dogpile

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/flight"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// Read-your-writes: a call that starts after a write of its key returned
// (Set, Delete, Refresh), or after the write's invalidation reached the near
// tier, never answers with the value the write replaced, whatever flight of
// the key is still in progress in the process.

// A lateRead holds back the reply of the next read of one value key (a GET,
// or the near tier's GET+PTTL pipeline): the read reaches Redis at once, so
// it sees what Redis holds at that moment, and its reply returns only once
// release is closed. It is the delayed-GET reproduction of issue 27.
type lateRead struct {
	vk      string
	armed   atomic.Bool
	read    chan struct{} // closed once the held read has its reply
	release chan struct{}
	once    sync.Once
}

func holdNextRead(t *testing.T, rdb redis.UniversalClient, vk string) *lateRead {
	h := &lateRead{vk: vk, read: make(chan struct{}), release: make(chan struct{})}
	h.armed.Store(true)
	t.Cleanup(h.free)
	v, ok := holders.Load(rdb)
	if !ok {
		t.Fatal("holdNextRead: no holder on the client (see installHolder)")
	}
	v.(*holder).cur.Store(h)
	return h
}

// holders maps a client to its holder (see installHolder).
var holders sync.Map

// A holder is the hook of a client that holds the lateRead in cur.
type holder struct {
	cur  atomic.Pointer[lateRead]
	hook redis.Hook
}

// installHolder hooks rdb so that holdNextRead can hold a read on it. It
// runs before a near tier is made on rdb: newNearCache gives the hook to
// the tier's readers too, which have a client of their own.
func installHolder(t *testing.T, rdb redis.UniversalClient) {
	hd := new(holder)
	cur := &hd.cur
	holders.Store(rdb, hd)
	t.Cleanup(func() { holders.Delete(rdb) })
	hold := func(cmds []redis.Cmder) {
		if h := cur.Load(); h != nil {
			h.hold(cmds)
		}
	}
	hook := redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			err := next(ctx, cmd)
			hold([]redis.Cmder{cmd})
			return err
		},
		Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			err := next(ctx, cmds)
			hold(cmds)
			return err
		},
	}
	hd.hook = hook
	rdb.AddHook(hook)
}

func (h *lateRead) hold(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if a := cmd.Args(); cmd.Name() == "get" && len(a) == 2 && a[1] == h.vk && h.armed.CompareAndSwap(true, false) {
			close(h.read)
			<-h.release
			return
		}
	}
}

func (h *lateRead) free() { h.once.Do(func() { close(h.release) }) }

// A write is one way of replacing the value "old" of a key; want is what a
// Fetch that starts after it must return (fresh: computed by that Fetch).
type write struct {
	name string
	do   func(ctx context.Context, c *Cache[string], key string) error
	want string
}

var writes = []write{
	{"Set", func(ctx context.Context, c *Cache[string], key string) error {
		return c.Set(ctx, key, "new", time.Minute)
	}, "new"},
	{"Delete", func(ctx context.Context, c *Cache[string], key string) error {
		return c.Delete(ctx, key)
	}, "fresh"},
	{"Refresh", func(ctx context.Context, c *Cache[string], key string) error {
		_, err := c.Refresh(ctx, key, time.Minute, redistest.Constant("new"))
		return err
	}, "new"},
	{"InvalidateTag", func(ctx context.Context, c *Cache[string], key string) error {
		return c.InvalidateTag(ctx, heldTag) // "old" carries it (see startHeldFetch)
	}, "fresh"},
}

// heldTag is the tag of the value "old" that startHeldFetch's Fetch reads.
const heldTag = "held"

// ryw runs f on a single server and on a cluster, each with and without a
// near tier.
func ryw(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient, near bool)) {
	for _, b := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"server", func(t *testing.T) redis.UniversalClient { return redistest.StartServer(t).Client(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return redistest.StartCluster(t, 3).Client(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			rdb := b.rdb(t)
			installHolder(t, rdb)
			t.Run("plain", func(t *testing.T) { f(t, rdb, false) })
			t.Run("near", func(t *testing.T) { f(t, rdb, true) })
		})
	}
}

// newRYWCache returns a Cache for the test, with a near tier whose
// tracking is in place if near is set.
func newRYWCache(t *testing.T, rdb redis.UniversalClient, near bool, opts ...Option) *Cache[string] {
	t.Helper()
	if !near {
		return New[string](rdb, append([]Option{prefix(t)}, opts...)...)
	}
	c := newNearCache[string](t, rdb, 100, opts...)
	if err := c.Set(t.Context(), "warm", "w", time.Minute); err != nil {
		t.Fatal(err)
	}
	fetchNear(t, c, "warm")
	return c
}

// startHeldFetch stores "old" under key and starts a Fetch of key whose
// GET reads "old" and whose reply is held back; it returns once that GET
// has been answered by Redis. Once the test's write has returned, it calls
// later, which lets the reply go 300 ms on (before the fix, a Fetch that
// joined the held one returned "old" then); finish waits for the held
// Fetch's answer.
func startHeldFetch(t *testing.T, rdb redis.UniversalClient, c *Cache[string], key string) (later func(), finish func() (string, error)) {
	t.Helper()
	ctx := t.Context()
	if err := c.SetTagged(ctx, key, "old", time.Minute, heldTag); err != nil {
		t.Fatal(err)
	}
	h := holdNextRead(t, rdb, c.valueKey(key))
	type answer struct {
		v   string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := c.Fetch(ctx, key, time.Minute, redistest.Constant("computed by the held Fetch"))
		done <- answer{v, err}
	}()
	<-h.read
	later = func() { time.AfterFunc(300*time.Millisecond, h.free) }
	return later, func() (string, error) {
		h.free()
		a := <-done
		return a.v, a.err
	}
}

// afterEachWrite runs read, on a server and a cluster, with and without a
// near tier, after each write of "k" that returned while a Fetch whose
// GET read the replaced value "old" is still in flight (issue 27's
// delayed-GET reproduction). The held Fetch itself answers "old": it read
// before the write.
func afterEachWrite(t *testing.T, read func(t *testing.T, c *Cache[string], w write)) {
	redistest.RequireServer(t)
	ryw(t, func(t *testing.T, rdb redis.UniversalClient, near bool) {
		for _, w := range writes {
			t.Run(w.name, func(t *testing.T) {
				c := newRYWCache(t, rdb, near)
				later, finish := startHeldFetch(t, rdb, c, "k")
				if err := w.do(t.Context(), c, "k"); err != nil {
					t.Fatal(err)
				}
				later()
				read(t, c, w)
				if v, err := finish(); err != nil || v != "old" {
					t.Errorf("the held Fetch = %q, %v; want old (it read before the write)", v, err)
				}
			})
		}
	})
}

// TestFetchAfterWrite: a Fetch that starts after Set, Delete or Refresh of
// its key, or InvalidateTag of its value's tag, returned does not join the
// flight of a Fetch whose GET read the key before the write (before the
// fix, it returned "old"). The InvalidateTag case came with the fix of a
// near tier that served a voided value (torture seed
// 12742486827157056321); it passed on the tree before that fix too.
func TestFetchAfterWrite(t *testing.T) {
	afterEachWrite(t, func(t *testing.T, c *Cache[string], w write) {
		v, err := c.Fetch(t.Context(), "k", time.Minute, redistest.Constant("fresh"))
		if err != nil || v != w.want {
			t.Errorf("Fetch after %s returned = %q, %v; want %q", w.name, v, err, w.want)
		}
	})
}

// TestFetchManyAfterWrite: the same for FetchMany, whose missing keys join
// the process's flights: after Delete returned, it computes the key rather
// than take the held Fetch's "old".
func TestFetchManyAfterWrite(t *testing.T) {
	afterEachWrite(t, func(t *testing.T, c *Cache[string], w write) {
		got, err := c.FetchMany(t.Context(), []string{"k"}, time.Minute, func(context.Context, []string) (map[string]string, error) {
			return map[string]string{"k": "fresh"}, nil
		})
		if err != nil || got["k"] != w.want {
			t.Errorf("FetchMany after %s returned = %v, %v; want k: %q", w.name, got, err, w.want)
		}
	})
}

// TestFetchAfterInvalidation: with a near tier, once the invalidation of a
// write by another client has arrived, no Fetch of the process returns the
// value it replaced, not even from a flight whose GET read it before.
func TestFetchAfterInvalidation(t *testing.T) {
	redistest.RequireServer(t)
	ryw(t, func(t *testing.T, rdb redis.UniversalClient, near bool) {
		if !near {
			t.Skip("without a near tier, this process hears nothing of another client's writes")
		}
		c := newRYWCache(t, rdb, true)
		other := New[string](rdb, prefix(t)) // another process's Cache: no forget here
		later, finish := startHeldFetch(t, rdb, c, "k")
		before := c.Stats().NearInvalidations
		if err := other.Set(t.Context(), "k", "new", time.Minute); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, "the invalidation of k", func() bool { return c.Stats().NearInvalidations > before })
		later()
		if v, err := c.Fetch(t.Context(), "k", time.Minute, redistest.Constant("fresh")); err != nil || v != "new" {
			t.Errorf("Fetch after the invalidation arrived = %q, %v; want new", v, err)
		}
		if v, err := finish(); err != nil || v != "old" {
			t.Errorf("the held Fetch = %q, %v; want old", v, err)
		}
	})
}

// TestRefreshAfterWrite: a Refresh that starts after Set returned does not
// join a Refresh whose compute started before it: it computes again. The
// first Refresh's store is refused (the Set took its lock), so it computes
// again too, or takes the second's value: its first value is never served.
func TestRefreshAfterWrite(t *testing.T) {
	redistest.RequireServer(t)
	ryw(t, func(t *testing.T, rdb redis.UniversalClient, near bool) {
		c := newRYWCache(t, rdb, near)
		ctx := t.Context()
		started, release := make(chan struct{}), make(chan struct{})
		first := make(chan string, 1)
		var calls atomic.Int32
		go func() {
			v, err := c.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
				if calls.Add(1) > 1 {
					return "recomputed", nil
				}
				close(started)
				<-release
				return "computed before the Set", nil
			})
			if err != nil {
				v = err.Error()
			}
			first <- v
		}()
		<-started
		if err := c.Set(ctx, "k", "set", time.Minute); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(300*time.Millisecond, func() { close(release) })
		v, err := c.Refresh(t.Context(), "k", time.Minute, redistest.Constant("computed after the Set"))
		if err != nil || v != "computed after the Set" {
			t.Errorf("Refresh after Set returned = %q, %v; want the value it computed", v, err)
		}
		if v := <-first; v != "computed after the Set" && v != "recomputed" {
			t.Errorf("the first Refresh = %q; want the second's value or its own recompute", v)
		}
		if v, err := c.Get(ctx, "k"); err != nil || v != "computed after the Set" && v != "recomputed" {
			t.Errorf("Get = %q, %v; want a value computed after the Set (the first compute's store is fenced off)", v, err)
		}
	})
}

// TestBackgroundRefreshAfterWrite: a background refresh whose compute
// started before Set stores nothing over the Set's value, and no Fetch
// after the Set sees its value (it has no callers to serve: nothing joins
// it; this guards its fenced store and the near tier).
func TestBackgroundRefreshAfterWrite(t *testing.T) {
	redistest.RequireServer(t)
	ryw(t, func(t *testing.T, rdb redis.UniversalClient, near bool) {
		c := newRYWCache(t, rdb, near, WithStale(time.Minute))
		ctx := t.Context()
		if err := c.Set(ctx, "k", "old", 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		redistest.Eventually(t, "k to turn stale", func() bool {
			pttl, err := rdb.PTTL(ctx, c.valueKey("k")).Result()
			return err == nil && pttl <= time.Minute
		})
		started, release := make(chan struct{}), make(chan struct{})
		v, err := c.Fetch(ctx, "k", time.Minute, func(context.Context) (string, error) {
			close(started)
			<-release
			return "refreshed before the Set", nil
		})
		if err != nil || v != "old" {
			t.Fatalf("Fetch of the stale value = %q, %v; want old", v, err)
		}
		<-started
		if err := c.Set(ctx, "k", "set", time.Minute); err != nil {
			t.Fatal(err)
		}
		close(release)
		redistest.Eventually(t, "the background refresh to end", func() bool { return !c.inFlight(laterFlight, "k") })
		for range 3 {
			if v := fetchValue(t, c, "k"); v != "set" {
				t.Fatalf("Fetch after the Set = %q; want set", v)
			}
		}
	})
}

// inFlight reports whether a flight of kind for key is in progress.
func (c *Cache[T]) inFlight(kind flight.Kind, key string) bool {
	return c.flights.Waiting(flightID{Kind: kind, Key: c.valueKey(key)}) >= 0
}

// TestNearReadsNeverGoBack: one caller's reads of a key never go back from
// a newer version to an older one, even when the flight that read the
// older one puts it in the near tier late (issue 27: the flight ended
// before its value went into the tier, so a caller that had been answered
// by a later flight found the older value there). Invalidations are held
// back so that the tier keeps what was put.
func TestNearReadsNeverGoBack(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	writer := New[string](rdb, prefix(t))
	if err := writer.Set(ctx, "k", "v1", time.Minute); err != nil { // before tracking: no invalidation
		t.Fatal(err)
	}
	c := newRYWCache(t, rdb, true)
	hold, holding := make(chan struct{}), make(chan struct{}, 1)
	c.near.Tracker().BeforeApply = func() {
		select {
		case holding <- struct{}{}:
			<-hold
		default:
		}
	}
	var blocked atomic.Bool
	resume := make(chan struct{})
	c.flights.OnEnd = func(id flightID) {
		if id.Key == c.valueKey("k") && blocked.CompareAndSwap(false, true) {
			<-resume // the first flight of k to end waits for the test
		}
	}
	firstDone := make(chan string, 1)
	go func() {
		v, _ := c.Fetch(ctx, "k", time.Minute, redistest.Constant("fresh")) // reads v1
		firstDone <- v
	}()
	redistest.Eventually(t, "the first flight to end", func() bool { return blocked.Load() })
	if err := writer.Set(ctx, "k", "v2", time.Minute); err != nil {
		t.Fatal(err)
	}
	<-holding // v2's invalidation is held back
	seen := []string{fetchValue(t, c, "k")}
	close(resume)
	seen = append(seen, <-firstDone)
	for range 3 {
		seen = append(seen, fetchValue(t, c, "k"))
	}
	close(hold)
	if s := slices.Delete(slices.Clone(seen), 1, 2); !slices.IsSorted(s) { // [1] is the first flight's
		t.Errorf("one caller's Fetches returned %v (the 2nd is another caller's): back in time", seen)
	}
}
