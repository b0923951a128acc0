package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// A fencer is one primitive's one-shot acquire, with the key of the
// fencing counter it draws from.
type fencer struct {
	name, counter string
	try           func(ctx context.Context) (*lock.Lease, bool, error)
}

// fencers returns every primitive that draws fences, on rdb: the mutex's
// script in its short form (the common call) and its long one, and a
// MultiMutex of two names, a counter each.
func fencers(rdb redis.UniversalClient) []fencer {
	s := lock.NewSemaphore(rdb, "s", 2)
	rw := lock.NewRWMutex(rdb, "w")
	rr := lock.NewRWMutex(rdb, "r")
	return []fencer{
		{"Mutex", "dogpile:mutex:{m}:fence", lock.NewMutex(rdb, "m").TryLock},
		{"Mutex, long form", "dogpile:mutex:{k}:fence", lock.NewMutex(rdb, "k", lock.WithRetention(time.Hour)).TryLock},
		{"fair Mutex", "dogpile:mutex:{f}:fence", lock.NewMutex(rdb, "f", lock.WithFair()).TryLock},
		{"Semaphore", "dogpile:sem:{s}:fence", func(ctx context.Context) (*lock.Lease, bool, error) { return s.TryAcquire(ctx, 1) }},
		{"RWMutex writer", "dogpile:rw:{w}:fence", rw.TryLock},
		{"RWMutex reader", "dogpile:rw:{r}:fence", rr.TryRLock},
		{"MultiMutex", "dogpile:mutex:{a}:fence", lock.NewMultiMutex(rdb, []string{"a", "b"}).TryLock},
	}
}

// TestFenceIsMaxOfCounterAndClock (issue 43): a fence is the server's clock
// in microseconds, or one above the counter's last number when that is
// ahead of the clock; a draw keeps the counter's TTL, and gives a new
// counter the retention. Every primitive that draws fences.
func TestFenceIsMaxOfCounterAndClock(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	for _, p := range fencers(rdb) {
		t.Run(p.name, func(t *testing.T) {
			before, err := rdb.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			f := fence(t, p)
			after := rdb.Time(ctx).Val()
			if f < before.UnixMicro() || f > after.UnixMicro() {
				t.Errorf("fence of a new counter = %d; want the clock, between %d and %d", f, before.UnixMicro(), after.UnixMicro())
			}
			if d := rdb.PTTL(ctx, p.counter).Val(); d < time.Hour-time.Minute || d > lock.DefaultRetention {
				t.Errorf("new counter's PTTL = %v; want its retention", d)
			}

			ahead := after.UnixMicro() + 1e12 // 11.6 days: a clock that went back
			rdb.Set(ctx, p.counter, ahead, time.Hour)
			if f := fence(t, p); f != ahead+1 {
				t.Errorf("fence of a counter ahead of the clock (%d) = %d; want %d", ahead, f, ahead+1)
			}
			if d := rdb.PTTL(ctx, p.counter).Val(); d < time.Hour-time.Minute || d > time.Hour {
				t.Errorf("PTTL after a draw = %v; want the counter's, 1h", d)
			}
			if f := fence(t, p); f != ahead+2 {
				t.Errorf("next fence = %d; want %d", f, ahead+2)
			}
		})
	}
}

// TestFenceCounterWithForeignString: another program's string where a
// fencing counter lives fails the acquire at once, takes nothing, and is
// left as it was (the draw swaps its number in, then puts the string back).
func TestFenceCounterWithForeignString(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	for _, p := range fencers(rdb) {
		t.Run(p.name, func(t *testing.T) {
			rdb.Set(ctx, p.counter, "not a number", time.Hour)
			if l, ok, err := p.try(ctx); ok || err == nil || errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("TryLock = %v, %v, %v; want an error", l, ok, err)
			}
			if v := rdb.Get(ctx, p.counter).Val(); v != "not a number" {
				t.Errorf("counter = %q after the failed acquire; want the foreign data back", v)
			}
			if d := rdb.PTTL(ctx, p.counter).Val(); d < time.Hour-time.Minute || d > time.Hour {
				t.Errorf("counter's PTTL = %v; want the foreign data's, 1h", d)
			}
			lock.WaitRollbacks()
			rdb.Del(ctx, p.counter)
			fence(t, p) // nothing was left behind
		})
	}
}

// fence acquires and releases p once and returns the fence.
func fence(t *testing.T, p fencer) int64 { t.Helper(); return draw(t, p).Fence() }

// draw acquires and releases p once and returns the lease.
func draw(t *testing.T, p fencer) *lock.Lease {
	t.Helper()
	l, ok, err := p.try(t.Context())
	if !ok || err != nil {
		t.Fatalf("%s: TryLock = %v, %v", p.name, ok, err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("%s: Unlock: %v", p.name, err)
	}
	return l
}
