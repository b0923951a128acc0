package dogpile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestMaxComputeHungHolderTakenOver: a compute that hangs and ignores its
// context keeps renewing its lease forever, unless WithMaxCompute bounds
// it: then another process takes over once the lease runs out past the
// bound, without waiting for the hung compute.
func TestMaxComputeHungHolderTakenOver(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t) // miniredis keys expire only on FastForward
	opts := []dogpile.Option{prefix(t), dogpile.WithLease(60 * time.Millisecond), dogpile.WithMaxCompute(100 * time.Millisecond)}
	hung, other := dogpile.New[int](rdb, opts...), dogpile.New[int](rdb, opts...)

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
	require.NoError(t, err, "Fetch while the holder hangs; want 2 from a takeover")
	require.Equal(t, 2, v, "Fetch while the holder hangs; want 2 from a takeover")
	s := other.Stats()
	assert.Equal(t, [2]uint64{1, 1}, [2]uint64{s.Takeovers, s.Computes}, "Stats = %+v; want 1 takeover, 1 compute", s)
	assert.ErrorIs(t, <-ctxErr, dogpile.ErrComputeTooLong, "compute's context cause; want errComputeTooLong")
	close(unblock)
	assert.NoError(t, <-hungDone, "hung Fetch; want its own value")
	// The late value must not overwrite the one stored by the takeover.
	got, err := other.Get(t.Context(), "k")
	assert.NoError(t, err, "Get; want 2 (the hung holder's store is fenced off)")
	assert.Equal(t, 2, got, "Get; want 2 (the hung holder's store is fenced off)")
}
