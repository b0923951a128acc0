package lock_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// Holders and waiters in child processes that are SIGKILLed: a crashed
// process gives its place back within its lease, with nothing to clean up.

func TestSemaphoreCrashedHolderProcess(t *testing.T) {
	// Two child processes take 2 permits each of 4 and are SIGKILLed: the
	// permits must come back within the lease (1s), with nothing left
	// to clean up by hand.
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	s := lock.NewSemaphore(rdb, "crash", 4)
	var kids []*holder
	for range 2 {
		h := startChild(t, srv.Addr(), "sem2", "crash")
		h.held(t)
		kids = append(kids, h)
	}
	if _, ok, _ := s.TryAcquire(t.Context(), 1); ok {
		t.Fatal("a permit was free while the children held all 4")
	}
	time.Sleep(1500 * time.Millisecond) // the children's watchdogs keep the lease past its TTL
	if avail, _ := s.Available(t.Context()); avail != 0 {
		t.Fatalf("Available = %d while the children are alive; want 0", avail)
	}
	for _, h := range kids {
		h.kill()
	}
	killed := time.Now()
	l, err := s.Acquire(t.Context(), 4)
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(killed); waited > 5*time.Second {
		t.Errorf("permits came back %v after the crash; want within the 1s lease", waited)
	}
	l.Unlock(t.Context())
}

func TestSemaphoreGhostWaitersLeaveQueue(t *testing.T) {
	// Five waiters queue behind a holder; three of them are processes that
	// are then SIGKILLed. The two live ones must get the lock in their
	// queue order, and the dead tickets must be gone within their lease.
	//
	// Only the ghosts (the children) have 1s tickets: the holder and the
	// live waiters use a TTL a stall of this process cannot outrun. With
	// 300ms for all, a loaded machine lost the holder's lease (the first
	// child took the lock: "queue has 0 waiters; want 1") or let a live
	// waiter's ticket lapse, which sent it to the back of the queue (2 runs
	// in 30 failed).
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	const q = "dogpile:mutex:{ghosts}:q"
	m := lock.NewMutex(rdb, "ghosts", lock.WithFair(), lock.WithTTL(time.Minute))
	held, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var kids []*holder
	got := make(chan string, 2)
	live := func() {
		l, err := m.Lock(t.Context())
		if err != nil {
			t.Error(err)
			got <- ""
			return
		}
		got <- l.Token()
		l.Unlock(context.Background())
	}
	// A child's ticket may lapse and rejoin (same token, at the back) if
	// the child stalls, so the live waiters are told apart by token, not
	// by their place when they joined.
	seen := map[string]bool{}
	var liveToks []string
	for i := range 5 {
		if i == 1 || i == 3 {
			go live()
		} else {
			kids = append(kids, startChild(t, srv.Addr(), "fair", "ghosts"))
		}
		waitQueue(t, rdb, q, int64(i+1))
		for _, tok := range queueOrder(t, rdb, q) {
			if !seen[tok] && (i == 1 || i == 3) {
				liveToks = append(liveToks, tok)
			}
			seen[tok] = true
		}
	}
	var want []string
	for _, tok := range queueOrder(t, rdb, q) {
		if slices.Contains(liveToks, tok) {
			want = append(want, tok)
		}
	}
	if len(want) != 2 {
		t.Fatalf("live waiters' tokens %q in the queue; want 2", want)
	}
	for _, h := range kids {
		h.kill()
	}
	killed := time.Now()
	if err := held.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	first, second := <-got, <-got
	if first != want[0] || second != want[1] {
		t.Errorf("live waiters acquired as %q, %q; want queue order %q", first, second, want)
	}
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("ghosts held up the queue for %v; want about one 1s ticket lease", d)
	}
	waitQueue(t, rdb, q, 0) // the last ghost's ticket expires with its lease
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("ghost tickets stayed queued for %v; want about one 1s ticket lease", d)
	}
}

func TestRWMutexCrashedReaderProcess(t *testing.T) {
	// A reader process is SIGKILLed while reading: a writer gets in within
	// the reader's 1s lease, not never.
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	h := startChild(t, srv.Addr(), "rlock", "crash")
	h.held(t)
	rw := lock.NewRWMutex(rdb, "crash")
	if _, ok, _ := rw.TryLock(t.Context()); ok {
		t.Fatal("TryLock succeeded while a reader held the lock")
	}
	h.kill()
	killed := time.Now()
	w, err := rw.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(killed); d > 5*time.Second {
		t.Errorf("writer waited %v after the reader died; want about its 1s lease", d)
	}
	w.Unlock(t.Context())
}
