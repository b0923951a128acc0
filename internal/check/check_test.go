package check

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/life"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTakeCapsTheRate: Burst checks may begin at once, then one every
// 1/Rate s, whatever the number of hits picked meanwhile.
func TestTakeCapsTheRate(t *testing.T) {
	k := New[int](nil, 1, nil, nil)
	every := int64(time.Second / Rate)
	now := int64(time.Hour) // any clock reading
	n := 0
	for range 1000 {
		if k.Take(now) {
			n++
		}
	}
	if n != Burst {
		t.Fatalf("%d checks began at once; want the burst, %d", n, Burst)
	}
	for i := range 10 { // a step of the clock frees one more, no more
		now += every
		if !k.Take(now) || k.Take(now) {
			t.Fatalf("step %d: want exactly one check to begin", i)
		}
	}
}

// TestPickFraction: of consecutive hit counts, Pick takes about fraction
// (Mix is a Weyl sequence: evenly within a few), none for a nil Checker.
func TestPickFraction(t *testing.T) {
	k := New[int](nil, 0.01, nil, nil)
	n := 0
	for i := range uint64(100_000) {
		if k.Pick(i) {
			n++
		}
	}
	if n < 990 || n > 1010 {
		t.Errorf("picked %d of 100,000 at 0.01; want 1,000 within 10", n)
	}
	var none *Checker[int]
	if none.Pick(0) || none.Limit() != 0 || none.Open() != 0 {
		t.Error("a nil Checker picks, or has a limit or open checks")
	}
}

// TestStepsInTurn: a check whose first step says Next runs the second one
// its After later, given the read of its Key; OK counts it sampled, Bad
// inconsistent and reported, Drop nothing; Close ends the goroutine
// (goleak).
func TestStepsInTurn(t *testing.T) {
	var l life.Life
	l.Init(errors.New("closed"))
	const after = 20 * time.Millisecond
	var second atomic.Int64 // when the second step ran, near.Now()
	var reported atomic.Int64
	first := func(_ context.Context, s *int, _ Got) Verdict {
		if *s == 0 {
			return Drop
		}
		if *s == 1 {
			return OK
		}
		return Next
	}
	var read atomic.Value // what the second step was given
	then := func(_ context.Context, s *int, g Got) Verdict {
		read.Store(string(g.B))
		second.Store(near.Now())
		return Bad
	}
	reads := func(_ context.Context, vks []string) []Got {
		gs := make([]Got, len(vks))
		for i, vk := range vks {
			gs[i].B = []byte("value of " + vk)
		}
		return gs
	}
	key := func(s *int) string { return fmt.Sprint("k", *s) }
	k := New(&l, 1, reads, func(_ context.Context, s *int) { reported.Add(int64(*s)) },
		Step[int]{Run: first}, Step[int]{After: after, Key: key, Run: then})
	start := near.Now()
	for s := range 3 {
		k.Offer(near.Now(), s)
	}
	redistest.Eventually(t, "the checks to end", func() bool { return k.Open() == 0 })
	sampled, bad := k.Counts()
	if sampled != 2 || bad != 1 || reported.Load() != 2 {
		t.Errorf("sampled %d, inconsistent %d, reported the check of %d; want 2, 1, 2", sampled, bad, reported.Load())
	}
	if got := read.Load(); got != "value of k2" {
		t.Errorf("the second step was given %q; want the read of its key, %q", got, "value of k2")
	}
	if d := time.Duration(second.Load() - start); d < after {
		t.Errorf("the second step ran %v after the offer; want at least its After, %v", d, after)
	}
	l.Close()
	l.Wait()
}

// TestCloseDropsTheRestOfARound: Close during a round of checks lets the
// step in progress end and runs none of the round's others (a verify that
// ignores its context would otherwise hold Close up once per check left).
func TestCloseDropsTheRestOfARound(t *testing.T) {
	var l life.Life
	l.Init(errors.New("closed"))
	var runs atomic.Int64
	started, release := make(chan struct{}, 1), make(chan struct{})
	slow := func(context.Context, *int, Got) Verdict {
		runs.Add(1)
		select {
		case started <- struct{}{}:
		default:
		}
		<-release // ignores its context, as some verify functions do
		return OK
	}
	k := New(&l, 1, nil, nil, Step[int]{Run: slow})
	for s := range 10 { // one round: all due at once
		k.Offer(near.Now(), s)
	}
	<-started
	l.Close() // cancels the checker's context; the step in progress goes on
	close(release)
	l.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("%d steps ran; want 1, the one in progress at Close", n)
	}
}
