package dogpile_test

// Refresh: a compute now, even of a cached key, shared with a compute
// already running anywhere in the fleet. Cases of the behaviour suite
// (fetch_test.go).

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func testRefreshForces(t *testing.T, b redistest.Backend) {
	ctx := t.Context()
	c := dogpile.New[string](b.Client(t), prefix(t))
	require.NoError(t, c.Set(ctx, "k", "old", time.Minute))
	if v, err := c.Refresh(ctx, "k", time.Minute, redistest.Constant("new")); v != "new" || err != nil {
		t.Fatalf("Refresh = %q, %v; want new", v, err)
	}
	if v, err := dogpile.New[string](b.Client(t), prefix(t)).Get(ctx, "k"); assert.NoError(t, err, "Get after Refresh = %q, %v; want new", v, err) {
		assert.Equal(t, "new", v, "Get after Refresh = %q, %v; want new", v, err)
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
	a := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	o := dogpile.New[string](b.Client(t), prefix(t), dogpile.WithLease(time.Minute))
	require.NoError(t, a.Set(ctx, "k", "old", time.Minute))
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
	dogpile.OnWait(o, hook)
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
	c := dogpile.New[string](redistest.StartServer(t).Client(t), prefix(t))
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
	v, err := c.Fetch(ctx, "\x00refresh:k", time.Minute, redistest.Constant("its own"))
	close(release)
	if err != nil || v != "its own" {
		t.Errorf("Fetch during Refresh(k) = %q, %v; want its own value", v, err)
	}
	require.NoError(t, <-done)
}

// TestRefreshAfterAwaitedHolderFails: a Refresh that waited for another
// process's compute of a cached key never answers with the value that was
// there before: when that compute fails, the Refresh fails as its waiters
// do (ErrComputeFailed); when its holder vanishes without storing (it died,
// or lost its lock), the Refresh computes itself. It answered "old" (found
// by issue 24's torture run: the script took the old value for the
// vanished holder's result).
//
// "restamped": a stale InvalidateTag takes the holder's lock and stamps the
// old value's expiry again (entry format 3, with WithStale): new bytes, the
// same value, which the Refresh passed over and must not take for the
// holder's result.
func TestRefreshAfterAwaitedHolderFails(t *testing.T) {
	for _, holderEnd := range []string{"fails", "vanishes", "restamped"} {
		t.Run(holderEnd, func(t *testing.T) {
			s := redistest.StartServer(t)
			ctx := t.Context()
			holder := dogpile.New[string](s.Client(t), prefix(t), dogpile.WithLease(200*time.Millisecond), dogpile.WithStale(time.Minute))
			refresher := dogpile.New[string](s.Client(t), prefix(t), dogpile.WithStale(time.Minute))
			require.NoError(t, holder.SetTagged(ctx, "k", "old", time.Minute, "t"))
			computing, end := make(chan struct{}), make(chan struct{})
			held := make(chan error, 1)
			go func() {
				_, err := holder.Refresh(ctx, "k", time.Minute, func(ctx context.Context) (string, error) {
					close(computing)
					<-end
					if holderEnd == "fails" {
						return "", errors.New("backend down")
					}
					<-ctx.Done() // its lock is taken away below: it gives up
					return "", ctx.Err()
				})
				held <- err
			}()
			<-computing
			waiting := make(chan struct{}, 1)
			dogpile.OnWait(refresher, func(string) { waiting <- struct{}{} })
			got := make(chan string, 1)
			go func() {
				v, err := refresher.Refresh(ctx, "k", time.Minute, redistest.Constant("new"))
				if err != nil {
					v = "error: " + err.Error()
					if errors.Is(err, dogpile.ErrComputeFailed) {
						v = "ErrComputeFailed"
					}
				}
				got <- v
			}()
			select {
			case <-waiting:
			case v := <-got:
				t.Fatalf("Refresh = %s before it waited for the holder's compute; want it to wait", v)
			case <-time.After(10 * time.Second):
				t.Fatal("Refresh did not wait for the holder's compute within 10 s")
			}
			if holderEnd == "vanishes" {
				// The lock goes, as if its lease ran out with the holder
				// frozen: no store, no error record.
				require.NoError(t, s.Client(t).Del(ctx, dogpile.KeysOf(holder, "k").Lock).Err())
				s.Client(t).Publish(ctx, dogpile.KeysOf(holder, "k").Channel, "r")
			}
			if holderEnd == "restamped" {
				require.NoError(t, holder.InvalidateTag(ctx, "t"))
			}
			close(end)
			<-held
			want := map[string]string{"fails": "ErrComputeFailed", "vanishes": "new", "restamped": "new"}[holderEnd]
			if v := <-got; v != want {
				t.Errorf("Refresh after the awaited holder %s = %s; want %s, never the old value", holderEnd, v, want)
			}
		})
	}
}

// refreshOverInvalidation runs a Refresh of k, tagged T and served stale,
// whose first compute is held until an InvalidateTag of T (which takes its
// compute lock) has returned; answer makes the n-th compute's result. It
// returns what Refresh returned and how many computes ran.
func refreshOverInvalidation(t *testing.T, answer func(n int) (string, error)) (*dogpile.Cache[string], string, error, int) {
	t.Helper()
	s := redistest.StartServer(t)
	ctx := t.Context()
	c := dogpile.New[string](s.Client(t), prefix(t), dogpile.WithStale(time.Minute))
	require.NoError(t, c.SetTagged(ctx, "k", "old", time.Minute, "T"))
	computing, release := make(chan struct{}), make(chan struct{})
	n := 0
	type result struct {
		v   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := c.Refresh(ctx, "k", time.Minute, func(ctx context.Context) (string, error) {
			n++
			if n == 1 {
				close(computing)
				<-release
			}
			return answer(n)
		})
		got <- result{v, err}
	}()
	<-computing
	require.NoError(t, c.InvalidateTag(ctx, "T"))
	close(release)
	r := <-got
	return c, r.v, r.err, n
}

// TestRefreshStoreRefused: a Refresh whose store is refused (an
// InvalidateTag took its compute lock meanwhile) computes again, so that
// once it returns no call of the Cache returns an older value: it returned
// its first value and left the invalidated one served stale (torture defect
// refresh-refused).
func TestRefreshStoreRefused(t *testing.T) {
	c, v, err, _ := refreshOverInvalidation(t, func(n int) (string, error) { return fmt.Sprint("new", n), nil })
	if assert.NoError(t, err, "Refresh whose first store was refused = %q, %v; want new2, computed again", v, err) {
		assert.Equal(t, "new2", v, "Refresh whose first store was refused = %q, %v; want new2, computed again", v, err)
	}
	if after, err := c.Fetch(t.Context(), "k", time.Minute, redistest.Constant("later")); assert.NoError(t, err, "Fetch after Refresh returned %q = %q, %v; want the Refresh's value, never an older one", v, after, err) {
		assert.Equal(t, v, after, "Fetch after Refresh returned %q = %q, %v; want the Refresh's value, never an older one", v, after, err)
	}
}

// TestRefreshNotFoundRefused: a Refresh whose compute finds the value gone
// (ErrNotFound, no WithNegativeTTL) while an InvalidateTag takes its lock
// computes again, rather than answering "not found" while the old value
// stays served stale (torture defect refresh-refused, not-found case).
func TestRefreshNotFoundRefused(t *testing.T) {
	c, _, err, n := refreshOverInvalidation(t, func(int) (string, error) { return "", dogpile.ErrNotFound })
	if !errors.Is(err, dogpile.ErrNotFound) || n != 2 {
		t.Errorf("Refresh = %v after %d computes; want ErrNotFound after 2", err, n)
	}
	if v, err := c.Get(t.Context(), "k"); !errors.Is(err, dogpile.ErrMiss) {
		t.Errorf("Get after the Refresh found k gone = %q, %v; want ErrMiss, not the old value", v, err)
	}
}
