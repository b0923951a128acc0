package dogpile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestMaxComputeHungHolderTakenOver: a compute that hangs and ignores its
// context keeps renewing its lease forever, unless WithMaxCompute bounds
// it: then another process takes over once the lease runs out past the
// bound, without waiting for the hung compute.
func TestMaxComputeHungHolderTakenOver(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t) // miniredis keys expire only on FastForward
	opts := []Option{prefix(t), WithLease(60 * time.Millisecond), WithMaxCompute(100 * time.Millisecond)}
	hung, other := New[int](rdb, opts...), New[int](rdb, opts...)

	unblock := make(chan struct{})
	computing := make(chan struct{})
	ctxErr := make(chan error, 1)
	hungDone := make(chan error, 1)
	go func() {
		_, err := hung.Fetch(t.Context(), "k", time.Minute, func(ctx context.Context) (int, error) {
			close(computing)
			<-ctx.Done()
			ctxErr <- context.Cause(ctx)
			<-unblock // hangs past its context, as a stuck call would
			return 1, nil
		})
		hungDone <- err
	}()
	<-computing

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	v, err := other.Fetch(ctx, "k", time.Minute, func(context.Context) (int, error) { return 2, nil })
	if err != nil || v != 2 {
		t.Fatalf("Fetch while the holder hangs = %v, %v; want 2 from a takeover", v, err)
	}
	if s := other.Stats(); s.Takeovers != 1 || s.Computes != 1 {
		t.Errorf("Stats = %+v; want 1 takeover, 1 compute", s)
	}
	if err := <-ctxErr; !errors.Is(err, errComputeTooLong) {
		t.Errorf("compute's context cause = %v; want errComputeTooLong", err)
	}
	close(unblock)
	if err := <-hungDone; err != nil {
		t.Errorf("hung Fetch = %v; want its own value", err)
	}
	// The late value must not overwrite the one stored by the takeover.
	if got, err := other.Get(t.Context(), "k"); err != nil || got != 2 {
		t.Errorf("Get = %v, %v; want 2 (the hung holder's store is fenced off)", got, err)
	}
}
