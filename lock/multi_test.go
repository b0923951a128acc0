package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

func testMultiNoDeadlock(t *testing.T, clients []redis.UniversalClient, goroutines, rounds int) {
	// Overlapping sets taken in opposite orders. A deadlock shows up as
	// the context timing out; an overlap as two holders of one name.
	sets := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "a", "b"}, {"c"}}
	inside := map[string]*atomic.Int32{"a": {}, "b": {}, "c": {}}
	var overlaps atomic.Int32
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for ci, c := range clients {
		for i := range goroutines {
			set := sets[(ci+i)%len(sets)]
			mm := lock.NewMultiMutex(c, set, lock.WithTTL(5*time.Second))
			wg.Go(func() {
				for range rounds {
					l, err := mm.Lock(ctx)
					if err != nil {
						t.Errorf("Lock(%v): %v", set, err)
						return
					}
					if got := len(l.Fences()); got != len(set) {
						t.Errorf("Fences() has %d names; want %d", got, len(set))
					}
					for _, n := range set {
						if inside[n].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(100 * time.Microsecond) // work: widens the window an overlap would need
					for _, n := range set {
						inside[n].Add(-1)
					}
					if err := l.Unlock(ctx); err != nil {
						t.Errorf("Unlock: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d times two holders shared a name", n)
	}
}

// The multi-name suite runs on every kind of deployment. On the cluster,
// "a", "b" and "c" hash to slots owned by three different masters, so
// each Lock takes three scripts in the global order.
var multiSuite = redistest.Suite{
	{Name: "NoDeadlock", Test: func(t *testing.T, b redistest.Backend) { testMultiNoDeadlock(t, b.Clients(t, 2), 10, 5) }},
	{Name: "AllOrNothing", Test: onClient(testMultiAllOrNothing)},
	{Name: "PartialLoss", Test: onClient(testMultiMutexPartialLoss)},
	{Name: "DuplicatesAndCancel", Test: onClient(testMultiMutexDuplicatesAndCancel)},
}

func TestMultiMutex(t *testing.T) {
	t.Parallel() // its own deployments; the cases touch no package state (see redistest.Suite)
	multiSuite.Run(t)
}

func testMultiAllOrNothing(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	b, err := lock.NewMutex(rdb, "b").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mm := lock.NewMultiMutex(rdb, []string{"c", "b", "a"})
	if _, ok, err := mm.TryLock(ctx); ok || err != nil {
		t.Fatalf("TryLock with b held = %v, %v; want false, nil", ok, err)
	}
	for _, name := range []string{"a", "c"} {
		l, ok, err := lock.NewMutex(rdb, name).TryLock(ctx)
		if !ok || err != nil {
			t.Errorf("%s is held after a failed multi TryLock (%v)", name, err)
			continue
		}
		l.Unlock(ctx)
	}
	got := make(chan *lock.Lease)
	go func() {
		l, err := mm.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("multi Lock succeeded while b was held")
	case <-time.After(50 * time.Millisecond): // long enough to be wrongly granted
	}
	b.Unlock(ctx) // wakes the multi waiter, which waits on b's channel
	var l *lock.Lease
	select {
	case l = <-got:
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("multi waiter not woken by the release of b")
	}
	f := l.Fences()
	if len(f) != 3 || f["a"] < 1 || f["b"] <= b.Fence() || f["c"] < 1 {
		t.Errorf("Fences = %v (b's previous fence %d); want one per name, b's increased", f, b.Fence())
	}
	// A plain Mutex of a held name is excluded.
	if _, ok, _ := lock.NewMutex(rdb, "a").TryLock(ctx); ok {
		t.Error("a plain Mutex locked a name the MultiMutex holds")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock = %v", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Unlock = %v; want ErrNotHeld", err)
	}
}

func testMultiMutexPartialLoss(t *testing.T, rdb redis.UniversalClient) {
	// One name's key vanishes (expired, deleted): the lease is lost, the
	// watchdog reports it, and Unlock frees the rest but says ErrNotHeld.
	ctx := t.Context()
	mm := lock.NewMultiMutex(rdb, []string{"x", "y"}, lock.WithTTL(90*time.Millisecond), lock.WithAutoExtend())
	l, err := mm.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, "dogpile:mutex:{y}")
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("lease not reported lost")
	}
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock = %v; want ErrNotHeld", err)
	}
	if _, ok, _ := lock.NewMutex(rdb, "x").TryLock(ctx); !ok {
		t.Error("x still held after Unlock of a partly lost lease")
	}
}

func testMultiMutexDuplicatesAndCancel(t *testing.T, rdb redis.UniversalClient) {
	mm := lock.NewMultiMutex(rdb, []string{"d", "d", "e"})
	l, err := mm.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(len(l.Fences())); got != "2" {
		t.Errorf("Fences has %s names; want 2", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lock.NewMultiMutex(rdb, []string{"e", "f"}).Lock(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Lock(cancelled) = %v; want ErrNotObtained and context.Canceled", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock with a cancelled ctx = %v", err)
	}
	if n := rdb.Exists(t.Context(), "dogpile:mutex:{d}", "dogpile:mutex:{e}", "dogpile:mutex:{f}").Val(); n != 0 {
		t.Errorf("%d lock keys left", n)
	}
}
