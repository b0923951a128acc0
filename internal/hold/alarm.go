package hold

import (
	"container/heap"
	"sync"
	"time"
)

// The process's alarms: one runtime timer for the first renewal of every
// watchdog (see watchRun), not one per lease.
//
// Why: a runtime timer due before every other one in the process (a lease's
// first renewal, a third of its TTL away, comes before the 3 s read
// deadlines go-redis sets on its connections) wakes the thread that sleeps
// in the network poller, so that it sleeps less; on a process that is
// otherwise idle that wake-up costs the caller several microseconds, on
// the path from the lock's reply to its work. Here only an alarm due
// before the one the timer is set for touches the timer: in a stream of
// leases with one TTL, each due after the ones before it, about one per
// interval. An alarm cancelled before it is due leaves the timer as it is
// (it then fires for nothing, and is set again for the next alarm, if any).

// An alarm calls f, in a goroutine of its own, at due, unless it is
// cancelled first.
type alarm struct {
	due   time.Time
	f     func()
	index int // in alarms.h; -1 once popped or cancelled
}

// alarms is the schedule: a heap by due time and the timer set for the
// earliest alarm (or an earlier one that was cancelled since).
type alarms struct {
	mu    sync.Mutex
	h     alarmHeap
	timer *time.Timer
	at    time.Time // when timer fires; zero while it is not set
	sets  int       // how often timer was set (tests count them)
}

var schedule alarms

// add schedules a.
func (s *alarms) add(a *alarm) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heap.Push(&s.h, a)
	if s.at.IsZero() || a.due.Before(s.at) {
		s.set(a.due)
	}
}

// cancel unschedules a and reports whether it did: false if a is due
// already (its f runs, or will run).
func (s *alarms) cancel(a *alarm) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.index < 0 {
		return false
	}
	heap.Remove(&s.h, a.index)
	return true
}

// set makes the timer fire at t. s.mu must be held.
func (s *alarms) set(t time.Time) {
	s.at, s.sets = t, s.sets+1
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(t), s.fire)
		return
	}
	s.timer.Reset(time.Until(t))
}

// fire is the timer's: it starts the alarms that are due and sets the
// timer for the next one. A fire that comes late, after the timer was set
// again, finds less to do, and sets it again to the same time.
func (s *alarms) fire() {
	s.mu.Lock()
	now := time.Now()
	var due []*alarm
	for len(s.h) > 0 && !s.h[0].due.After(now) {
		due = append(due, heap.Pop(&s.h).(*alarm))
	}
	s.at = time.Time{}
	if len(s.h) > 0 {
		s.set(s.h[0].due)
	}
	s.mu.Unlock()
	for _, a := range due {
		go a.f()
	}
}

// alarmHeap orders alarms by due time (container/heap).
type alarmHeap []*alarm

func (h alarmHeap) Len() int           { return len(h) }
func (h alarmHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h alarmHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *alarmHeap) Push(x any) {
	a := x.(*alarm)
	a.index = len(*h)
	*h = append(*h, a)
}
func (h *alarmHeap) Pop() any {
	old := *h
	a := old[len(old)-1]
	old[len(old)-1] = nil
	a.index = -1
	*h = old[:len(old)-1]
	return a
}
