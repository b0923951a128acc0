package hold

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAlarmsSetTimerOnlyForEarlier: an alarm due after the one the timer
// is set for leaves the timer alone, and so does a cancelled one; only an
// earlier alarm sets it again.
func TestAlarmsSetTimerOnlyForEarlier(t *testing.T) {
	var s alarms
	defer func() { s.timer.Stop() }()
	base := time.Now().Add(time.Hour)
	as := make([]*alarm, 100)
	for i := range as {
		as[i] = &alarm{due: base.Add(time.Duration(i) * time.Millisecond), f: func() { t.Error("an alarm an hour away fired") }}
		s.add(as[i])
		if i%2 == 0 && !s.cancel(as[i]) {
			t.Fatalf("cancel of alarm %d, not due: false", i)
		}
	}
	if s.sets != 1 {
		t.Errorf("timer set %d times for 100 alarms, each due after the one before; want 1", s.sets)
	}
	s.add(&alarm{due: base.Add(-time.Minute), f: func() {}})
	if s.sets != 2 {
		t.Errorf("timer set %d times after an earlier alarm; want 2", s.sets)
	}
	if len(s.h) != 51 {
		t.Errorf("%d alarms scheduled; want 51 (50 cancelled)", len(s.h))
	}
}

// TestAlarmsFireWhenDue: alarms fire at their due time, not before,
// except those cancelled, which never fire; a fired alarm cannot be
// cancelled.
func TestAlarmsFireWhenDue(t *testing.T) {
	var s alarms
	var mu sync.Mutex
	fired := map[int]time.Time{}
	var wg sync.WaitGroup
	now := time.Now()
	as := make([]*alarm, 5)
	for i := range as {
		as[i] = &alarm{due: now.Add(time.Duration(5-i) * 20 * time.Millisecond), f: func() {
			defer wg.Done()
			mu.Lock()
			fired[i] = time.Now()
			mu.Unlock()
		}}
		wg.Add(1)
		s.add(as[i])
	}
	if !s.cancel(as[2]) {
		t.Fatal("cancel of an alarm not due yet: false")
	}
	wg.Done()
	wg.Wait()
	if _, ok := fired[2]; ok || len(fired) != 4 {
		t.Errorf("fired %v; want alarms 0, 1, 3 and 4: 2 was cancelled", slices.Sorted(maps.Keys(fired)))
	}
	for i, at := range fired {
		if at.Before(as[i].due) {
			t.Errorf("alarm %d fired %v before it was due", i, as[i].due.Sub(at))
		}
	}
	if s.cancel(as[0]) {
		t.Error("cancel of a fired alarm: true")
	}
}

// TestWatchdogIdleForShortLease: a lease that ends before its first
// renewal is due never renews, and leaves nothing scheduled.
func TestWatchdogIdleForShortLease(t *testing.T) {
	var calls atomic.Int32
	var k Clock
	k.Start(Config{Sent: time.Now(), TTL: time.Hour, AutoExtend: true, Lost: errLost,
		Extend: func(context.Context, time.Duration) Outcome { calls.Add(1); return Renewed }})
	k.StopWatchdog()
	k.End(errLost)
	if calls.Load() != 0 {
		t.Errorf("%d renewals of a lease that ended at once", calls.Load())
	}
	if k.run.start.index != -1 {
		t.Error("the watchdog's alarm is still scheduled after StopWatchdog")
	}
}
