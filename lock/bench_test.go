package lock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// BenchmarkLockUnlock measures an uncontended Lock+Unlock: two round trips.
// Peer comparisons live in the bench module.
func BenchmarkLockUnlock(b *testing.B) {
	rdb := redistest.StartServer(b).Client(b)
	m := lock.NewMutex(rdb, "bench")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWakeLatency measures how long a blocked waiter takes to acquire
// after the holder's Unlock returns: the push wake-up path. It reports the
// median and the 99th percentile in microseconds.
func BenchmarkWakeLatency(b *testing.B) {
	rdb := redistest.StartServer(b).Client(b)
	m := lock.NewMutex(rdb, "wake", lock.WithTTL(time.Minute))
	ctx := context.Background()
	var lags []time.Duration
	for b.Loop() {
		held, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time)
		go func() {
			l, err := m.Lock(ctx)
			if err != nil {
				b.Error(err)
			}
			got <- time.Now()
			l.Unlock(ctx)
		}()
		waitForWaiter(b, rdb, "dogpile:mutex:{wake}:wake")
		if err := held.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		lags = append(lags, (<-got).Sub(released))
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds()), "wake-p50-µs")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds()), "wake-p99-µs")
}
