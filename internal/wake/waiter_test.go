package wake

import (
	"context"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestBackoffStaysWithinBounds(t *testing.T) {
	b := NewBackoff(4*time.Millisecond, 32*time.Millisecond)
	bound := 4 * time.Millisecond
	for range 100 {
		if d := b.Next(); d < time.Millisecond || d >= bound+time.Millisecond {
			t.Fatalf("wait %v outside [1ms, %v)", d, bound+time.Millisecond)
		}
		bound = min(2*bound, 32*time.Millisecond)
	}
}

// TestWaiterPolicy: a Waiter asks for one more try right after it
// subscribes (or moves), then waits for a published wake-up, which carries
// its payload, or for the holder's remaining time; without a channel it
// polls, never past the holder's time.
func TestWaiterPolicy(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	w := NewWaiter(rdb, time.Millisecond, 5*time.Millisecond)
	defer w.Close()

	if w.Watch(ctx, "") || w.Subscribed() {
		t.Fatal("Watch of no channel asked for a try, or subscribed")
	}
	start := time.Now()
	if woken, err := w.Wait(ctx, time.Hour); err != nil || woken != Polled || time.Since(start) > time.Second {
		t.Fatalf("poll = %v, %v after %v; want a backoff of a few ms", woken, err, time.Since(start))
	}
	if !w.Watch(ctx, "ch") || !w.Subscribed() || w.Watch(ctx, "ch") {
		t.Fatal("Watch(ch) did not subscribe once, asking for one more try")
	}
	start = time.Now()
	if woken, err := w.Wait(ctx, 20*time.Millisecond); err != nil || woken != Polled || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("wait with no message = %v, %v after %v; want the holder's 20ms", woken, err, time.Since(start))
	}
	go func() { _ = rdb.Publish(context.Background(), "ch", Deleted).Err() }()
	if woken, err := w.Wait(ctx, time.Hour); err != nil || woken != Pushed || w.Payload() != Deleted {
		t.Fatalf("wait for a message = %v, %v, payload %q; want Pushed, %q", woken, err, w.Payload(), Deleted)
	}
	if !w.Watch(ctx, "other") {
		t.Fatal("moving to another channel did not ask for one more try")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Wait(cctx, time.Hour); err != context.Canceled {
		t.Fatalf("Wait on a done context = %v", err)
	}
}
