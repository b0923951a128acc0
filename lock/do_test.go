package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/lock"
)

// lock.Do, in the mutex suite: it releases on a panic, gives fn its
// lease, and cancels fn when the lease is lost.

func testDoReleasesOnPanic(t *testing.T, rdb redis.UniversalClient) {
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v; want boom", r)
			}
		}()
		lock.Do(t.Context(), rdb, "job", func(context.Context, *lock.Lease) error { panic("boom") })
	}()
	l, ok, _ := lock.NewMutex(rdb, "job").TryLock(t.Context())
	if !ok {
		t.Error("Do left the lock held after fn panicked")
	}
	l.Unlock(t.Context())
}

// testDoGivesTheLease: fn gets the lease it runs under, held, with a
// fence, so that it can hand the fence to its storage (issue 20: the block
// form hid the lease).
func testDoGivesTheLease(t *testing.T, rdb redis.UniversalClient) {
	var fences []int64
	for range 2 {
		err := lock.Do(t.Context(), rdb, "fenced", func(ctx context.Context, l *lock.Lease) error {
			if l == nil || l.Err() != nil || l.Fence() <= 0 {
				return fmt.Errorf("fn got lease %v (err %v)", l, l.Err())
			}
			fences = append(fences, l.Fence())
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if fences[1] <= fences[0] {
		t.Errorf("fences %v; want increasing", fences)
	}
}

func testDoCancelsFnWhenLeaseLost(t *testing.T, rdb redis.UniversalClient) {
	err := lock.Do(t.Context(), rdb, "job", func(ctx context.Context, _ *lock.Lease) error {
		rdb.Del(ctx, "dogpile:mutex:{job}")
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, lock.ErrLost) {
				t.Errorf("cause = %v; want ErrLost", cause)
			}
			return nil
		case <-time.After(3 * time.Second):
			return errors.New("fn's context not cancelled after the lease was lost")
		}
	}, lock.WithTTL(60*time.Millisecond))
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Do = %v; want ErrNotHeld (work may have overlapped)", err)
	}
	want := errors.New("fn failed")
	if err := lock.Do(t.Context(), rdb, "job", func(context.Context, *lock.Lease) error { return want }); err != want {
		t.Errorf("Do = %v; want fn's error", err)
	}
}
