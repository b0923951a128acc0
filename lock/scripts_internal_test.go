package lock

import (
	"fmt"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The acquire and release scripts, called directly: what a retry, a
// short call or a marked lock finds.

func TestAcquireRetryIsIdempotent(t *testing.T) {
	// go-redis resends a script whose reply was lost. The resent acquire
	// must see its own token as success, with a new, larger fence (the
	// lost reply's never reached the caller), not as busy.
	rdb := redistest.Start(t)
	m := NewMutex(rdb, "retried")
	keys := []string{m.lock, m.fence}
	first, err := mutexAcquire.Run(t.Context(), rdb, keys, "tok:", 1000, 0, "", 60000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	again, err := mutexAcquire.Run(t.Context(), rdb, keys, "tok:", 1000, 0, "", 60000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 || again <= first {
		t.Errorf("acquire = %v, retry = %v; want a fence, then a larger one", first, again)
	}
	other, err := mutexAcquire.Run(t.Context(), rdb, keys, "other:", 1000, 0, "", 60000).Result()
	var ticket int64
	if r := acquireReply(other, err, &ticket); r.granted || r.v <= 0 || r.v > 1000 || ticket <= again {
		t.Errorf("another owner's acquire = %v, %v; want busy with the holder's PTTL and a ticket", other, err)
	}
}

// TestFairAcquireRetryIsIdempotent: the same for a fair mutex's (a
// semaphore's) acquire, whose fences are large numbers (server time in
// microseconds) that must survive being stored in Lua strings.
func TestFairAcquireRetryIsIdempotent(t *testing.T) {
	rdb := redistest.Start(t)
	m := NewMutex(rdb, "retried", WithFair())
	s := m.fair
	run := func() []int64 {
		res, err := semAcquire.Run(t.Context(), rdb, s.keys, "tok", 1, 1, 1000, "wait", s.prefix, s.publish, 60000, s.fairArg).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first, again := run(), run()
	if first[0] != 1 || again[0] != 1 || first[1] != again[1] || first[1] < 1e15 {
		t.Errorf("acquire = %v, retry = %v; want both {1, same fence from the server clock}", first, again)
	}
	if v := rdb.Get(t.Context(), m.lock).Val(); v != fmt.Sprint("tok:", first[1]) {
		t.Errorf("plain key = %q; want tok:%d (a fair grant holds it too)", v, first[1])
	}
}

// TestShortAcquireAndRelease: the common call's two-argument acquire is
// idempotent too; it sets the value "token:" and draws from a new
// counter the server's clock. A release finds the lock ours by its exact
// value, by its value with a waiter's mark after it (then reserving it for
// that ticket), or with a fence after the colon (a MultiMutex's value).
func TestShortAcquireAndRelease(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	m := NewMutex(rdb, "short")
	keys := []string{m.lock, m.fence}
	first, err := mutexAcquire.Run(ctx, rdb, keys, "tok:", 1000).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if first < 1e15 || rdb.Get(ctx, m.lock).Val() != "tok:" || rdb.PTTL(ctx, m.fence).Val() <= 0 {
		t.Fatalf("short acquire = %v, value %q, counter's PTTL %v; want a fence from the clock, value \"tok:\", a counter that expires",
			first, rdb.Get(ctx, m.lock).Val(), rdb.PTTL(ctx, m.fence).Val())
	}
	if again, err := mutexAcquire.Run(ctx, rdb, keys, "tok:", 1000).Int64(); err != nil || again <= first {
		t.Fatalf("short acquire = %v, retry = %v, %v; want a larger fence", first, again, err)
	}
	if ok, err := m.release(ctx, "to"); ok || err != nil {
		t.Errorf("release by a token's prefix = %v, %v; want not held", ok, err)
	}
	if ok, err := m.release(ctx, "tok"); !ok || err != nil || rdb.Exists(ctx, m.lock).Val() != 0 {
		t.Errorf("release by exact value = %v, %v; want released, key gone", ok, err)
	}
	rdb.Set(ctx, m.lock, "tok:+7", time.Second)
	if ok, err := m.release(ctx, "tok"); !ok || err != nil || rdb.Get(ctx, m.lock).Val() != "~7" {
		t.Errorf("release of a marked lock = %v, %v, value %q; want released and reserved for ticket 7", ok, err, rdb.Get(ctx, m.lock).Val())
	}
	rdb.Set(ctx, m.lock, fmt.Sprintf("tok:%d", first), time.Second)
	if ok, err := m.release(ctx, "tok"); !ok || err != nil || rdb.Exists(ctx, m.lock).Val() != 0 {
		t.Errorf("release of a value with a fence = %v, %v; want released", ok, err)
	}
}
