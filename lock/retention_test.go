package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// waitKeys waits until rdb holds n keys.
func waitKeys(t *testing.T, rdb *redis.Client, n int64, why string) {
	t.Helper()
	var got int64
	if !redistest.Within(redistest.EventuallyWithin, func() bool { got = rdb.DBSize(t.Context()).Val(); return got == n }) {
		t.Fatalf("%s: %d keys (%v) after %v; want %d", why, got, rdb.Keys(t.Context(), "*").Val(), redistest.EventuallyWithin, n)
	}
}

// TestRetentionLeavesNoKeys: locks named per request leave nothing behind
// once their retention has passed: the 1000-invoices case, and every
// primitive abandoned with a holder and a waiter queued.
func TestRetentionLeavesNoKeys(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	const keep = time.Second // long enough for 200 calls on a loaded machine
	start := time.Now()
	for i := range 200 {
		err := lock.Do(ctx, rdb, fmt.Sprint("invoice:", i), func(context.Context, *lock.Lease) error { return nil },
			lock.WithTTL(100*time.Millisecond), lock.WithRetention(keep))
		if err != nil {
			t.Fatal(err)
		}
	}
	n := rdb.DBSize(ctx).Val()
	if took := time.Since(start); took < keep && n != 200 {
		t.Errorf("%d keys right after 200 lock.Do; want 200 fencing counters", n)
	} else if took >= keep {
		t.Logf("200 lock.Do took %v, past the retention: the first counters may have gone", took)
	}
	waitKeys(t, rdb, 0, "after the retention of 200 lock.Do calls")

	opts := []lock.Option{lock.WithTTL(100 * time.Millisecond), lock.WithRetention(200 * time.Millisecond)}

	// Abandoned: held, never released, with a waiter that gave up.
	for _, p := range primitives(rdb, "abandoned", opts...) {
		if _, err := p.lock(ctx); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		p.lock(wctx)
		cancel()
	}
	rw := lock.NewRWMutex(rdb, "abandoned-r", opts...)
	if _, err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	rw.Lock(wctx) // a writer queued behind the reader
	cancel()
	lock.WaitRollbacks()
	waitKeys(t, rdb, 0, "after the TTL and the retention of abandoned locks")
}

// TestFencesIncreaseAcrossRetention: when an idle lock's counter has
// expired, the next fence is still above every earlier one, for every
// primitive; a counter from before retention existed (no TTL, small
// numbers) draws the server's clock, above its numbers, and
// expires from then on.
func TestFencesIncreaseAcrossRetention(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	for _, p := range primitives(rdb, "reset", lock.WithRetention(30*time.Millisecond)) {
		var last int64
		for round := range 3 {
			l, err := p.lock(ctx)
			if err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			if p.name != "Redlock" && l.Fence() <= last { // Redlock has no fences
				t.Errorf("%s round %d: fence %d after %d; want strictly increasing", p.name, round, l.Fence(), last)
			}
			last = l.Fence()
			l.Unlock(ctx)
			waitKeys(t, rdb, 0, p.name+": after the retention")
		}
	}

	// A counter made before retention existed: no TTL, small numbers.
	rdb.Set(ctx, "dogpile:mutex:{legacy}:fence", 41, 0)
	l, err := lock.NewMutex(rdb, "legacy").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() < 1e15 {
		t.Errorf("fence on a legacy counter (41) = %d; want the server's clock in µs", l.Fence())
	}
	if d := rdb.PTTL(ctx, "dogpile:mutex:{legacy}:fence").Val(); d <= 0 {
		t.Errorf("legacy counter PTTL = %v; want the retention", d)
	}
	l.Unlock(ctx)
}
