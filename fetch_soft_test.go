package dogpile_test

// WithSoftTimeout: a caller that finds a stale value waits a little for
// its refresh. Cases of the behaviour suite (fetch_test.go).

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// testSoftTimeout: a refresh slower than the soft timeout costs the caller
// the timeout and gives it the stale value, and is stored afterwards; one
// that is quicker gives it the fresh value. Without WithStale nothing is
// stale and the option changes nothing.
func testSoftTimeout(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	const soft = 300 * time.Millisecond
	c := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour), dogpile.WithSoftTimeout(soft))
	_, err := c.Fetch(ctx, "slow", 100*time.Millisecond, redistest.Constant("v1"))
	require.NoError(t, err)
	_, err = c.Fetch(ctx, "quick", 100*time.Millisecond, redistest.Constant("v1"))
	require.NoError(t, err)
	pass(b, 150*time.Millisecond)

	release := make(chan struct{})
	start := time.Now()
	v, err := c.Fetch(ctx, "slow", time.Hour, func(context.Context) (string, error) { <-release; return "v2", nil })
	if took := time.Since(start); err != nil || v != "v1" || took < soft {
		t.Errorf("Fetch of a stale value whose refresh is slow = %q, %v after %v; want v1 after the soft timeout %v", v, err, took, soft)
	}
	close(release)
	redistest.Eventually(t, "the slow refresh stored", func() bool { v, err := c.Get(ctx, "slow"); return err == nil && v == "v2" })

	slow := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour), dogpile.WithSoftTimeout(time.Minute))
	if v, err := slow.Fetch(ctx, "quick", time.Hour, redistest.Constant("v2")); err != nil || v != "v2" {
		t.Errorf("Fetch of a stale value whose refresh is quick = %q, %v; want the fresh v2", v, err)
	}
	if s := slow.Stats(); s.Stale != 0 || s.Refreshes != 1 {
		t.Errorf("Stats = %+v; want the refresh counted and no stale answer", s)
	}

	plain := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithSoftTimeout(soft))
	_, err = plain.Fetch(ctx, "plain", 100*time.Millisecond, redistest.Constant("v1"))
	require.NoError(t, err)
	pass(b, 150*time.Millisecond)
	if v, err := plain.Fetch(ctx, "plain", time.Hour, redistest.Constant("v2")); err != nil || v != "v2" {
		t.Errorf("Fetch after the TTL without WithStale = %q, %v; want v2, computed", v, err)
	}
}

// testSoftTimeoutOtherProcess: the refresh a caller waits for may be
// another process's: its store wakes the caller, which computes nothing.
func testSoftTimeoutOtherProcess(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithStale(time.Hour), dogpile.WithSoftTimeout(time.Minute))
	_, err := a.Fetch(ctx, "k", 100*time.Millisecond, redistest.Constant("v1"))
	require.NoError(t, err)
	pass(b, 150*time.Millisecond)
	release, computing := make(chan struct{}), make(chan struct{})
	v, err := a.Fetch(ctx, "k", time.Hour, func(context.Context) (string, error) {
		close(computing)
		<-release
		return "v2", nil
	})
	require.NoError(t, err)
	require.Equal(t, "v1", v, "the stale value, served at once without a soft timeout")
	<-computing // a's refresh holds the lock
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	v, err = o.Fetch(ctx, "k", time.Hour, redistest.Constant("computed by o"))
	if err != nil || v != "v2" {
		t.Errorf("Fetch while another process refreshes = %q, %v; want its v2", v, err)
	}
	settle(t, o)
	if s := o.Stats(); s.Refreshes != 0 || s.Computes != 0 {
		t.Errorf("Stats = %+v; want no compute in the waiting process", s)
	}
}
