package dogpile

// Refresh: a compute now, even of a cached key, shared with a compute
// already running anywhere in the fleet. Cases of the behaviour suite
// (fetch_test.go).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func testRefreshForces(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := New[string](b.Client(t), prefix(t))
	if err := c.Set(ctx, "k", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Refresh(ctx, "k", time.Minute, constant("new")); v != "new" || err != nil {
		t.Fatalf("Refresh = %q, %v; want new", v, err)
	}
	if v, err := New[string](b.Client(t), prefix(t)).Get(ctx, "k"); v != "new" || err != nil {
		t.Errorf("Get after Refresh = %q, %v; want new", v, err)
	}
	errDB := errors.New("db down")
	if _, err := c.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) { return "", errDB }); !errors.Is(err, errDB) {
		t.Errorf("failing Refresh: err = %v; want %v", err, errDB)
	}
	if v, _ := c.Get(ctx, "k"); v != "new" {
		t.Errorf("Get after a failed Refresh = %q; want new (kept)", v)
	}
}

func testRefreshJoinsRunningCompute(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	o := New[string](b.Client(t), prefix(t), WithLease(time.Minute))
	if err := a.Set(ctx, "k", "old", time.Minute); err != nil {
		t.Fatal(err)
	}
	// a's Refresh computes; o's Refresh waits for it instead of computing.
	release, computing := make(chan struct{}), make(chan struct{})
	done := make(chan result[string], 1)
	go func() {
		v, err := a.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
			close(computing)
			<-release
			return "new", nil
		})
		done <- result[string]{v, err}
	}()
	<-computing
	hook, waiting := waitSignal()
	o.onWait = hook
	got := make(chan result[string], 1)
	go func() {
		v, err := o.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
			return "", errors.New("second compute; want it to wait")
		})
		got <- result[string]{v, err}
	}()
	<-waiting
	close(release)
	for _, ch := range []chan result[string]{done, got} {
		if r := <-ch; r.v != "new" || r.err != nil {
			t.Errorf("Refresh = %q, %v; want new from the one compute", r.v, r.err)
		}
	}
}

// TestFlightNamesDoNotCollide: keys come from data, so no key may join a
// flight of another kind: a Fetch of a key spelled like a name a Refresh
// once used for its flight computes its own value.
func TestFlightNamesDoNotCollide(t *testing.T) {
	c := New[string](redistest.StartServer(t).Client(t), prefix(t))
	ctx := t.Context()
	release, computing := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Refresh(ctx, "k", time.Minute, func(context.Context) (string, error) {
			close(computing)
			<-release
			return "value of k", nil
		})
		done <- err
	}()
	<-computing
	v, err := c.Fetch(ctx, "\x00refresh:k", time.Minute, constant("its own"))
	close(release)
	if err != nil || v != "its own" {
		t.Errorf("Fetch during Refresh(k) = %q, %v; want its own value", v, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
