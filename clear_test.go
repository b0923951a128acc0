package dogpile

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestClear: Clear removes every value of the Cache's prefix on every node,
// voids a compute in progress (its store is fenced off), and leaves the
// keys of the lock package and of other prefixes alone.
func TestClear(t *testing.T) {
	redistest.ForEachBackend(t, func(t *testing.T, b redistest.Backend) {
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
	if v, err := a.Fetch(ctx, "k", time.Minute, constant("new")); err != nil || v != "new" {
		t.Errorf("Fetch after Clear in the clearing process = %q, %v; want new", v, err)
	}
	redistest.Eventually(t, "the other process's tier to drop k", func() bool {
		v, err := b.Fetch(ctx, "k", time.Minute, constant("new"))
		return err == nil && v == "new"
	})
}
