package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A clock is a settable time for Summary.clock.
type clock struct{ t time.Duration }

func (c *clock) now() time.Duration       { return c.t }
func (c *clock) advance(d time.Duration)  { c.t += d }
func newSummary(c *clock) *Summary        { return &Summary{clock: c.now} }
func read(s *Summary, key string, n int)  { s.Add(key, Counts{Reads: uint64(n)}) }
func reads(top []Entry) map[string]uint64 { return toMap(top, func(e Entry) uint64 { return e.Reads }) }

func toMap(top []Entry, f func(Entry) uint64) map[string]uint64 {
	m := make(map[string]uint64, len(top))
	for _, e := range top {
		m[e.Key] = f(e)
	}
	return m
}

// TestTopExactBelowCapacity: with fewer keys than Capacity nothing is
// replaced, so every count is exact, and Top orders by reads, then key.
func TestTopExactBelowCapacity(t *testing.T) {
	s := newSummary(&clock{})
	for i := range 100 {
		k := fmt.Sprint("k", i)
		for range i + 1 {
			s.Add(k, Counts{Reads: 1})
		}
		s.Add(k, Counts{Misses: uint64(i % 3), Computes: uint64(i % 5), Waits: uint64(i % 7)})
	}
	s.Add("tie", Counts{Reads: 100})
	top := s.Top(200)
	if len(top) != 101 {
		t.Fatalf("Top(200) has %d keys; want 101", len(top))
	}
	if top[0].Key != "k99" || top[1].Key != "tie" {
		t.Errorf("Top starts %q, %q; want k99, tie (100 reads each, in key order)", top[0].Key, top[1].Key)
	}
	for _, e := range top {
		if e.Key == "tie" {
			continue
		}
		var i int
		fmt.Sscanf(e.Key, "k%d", &i)
		want := Counts{Reads: uint64(i + 1), Misses: uint64(i % 3), Computes: uint64(i % 5), Waits: uint64(i % 7)}
		if e.Counts != want {
			t.Errorf("%s: %+v; want %+v", e.Key, e.Counts, want)
		}
	}
	for i := 1; i < len(top); i++ {
		if top[i].Reads > top[i-1].Reads {
			t.Fatalf("Top not ordered by reads at %d: %d after %d", i, top[i].Reads, top[i-1].Reads)
		}
	}
}

// TestTopFindsHeavyKeysAmongMany: ten heavy keys hidden in a stream of
// 200,000 keys read once each come out first, in order, each within the
// Space-Saving bound of its true count.
func TestTopFindsHeavyKeysAmongMany(t *testing.T) {
	s := newSummary(&clock{})
	const heavy, singles = 10, 200_000
	truth := map[string]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	var total uint64
	for i := range singles {
		s.Add("single:"+strconv.Itoa(i), Counts{Reads: 1})
		total++
		if h := rng.IntN(4 * heavy); h < heavy { // key h at about (heavy-h)/... of reads
			for range heavy - h {
				k := "heavy:" + strconv.Itoa(h)
				s.Add(k, Counts{Reads: 1})
				truth[k]++
				total++
			}
		}
	}
	top := s.Top(heavy)
	bound := total / Capacity
	for i, e := range top {
		want := "heavy:" + strconv.Itoa(i)
		if e.Key != want {
			t.Fatalf("Top[%d] = %s; want %s (%v)", i, e.Key, want, top)
		}
		if e.Reads < truth[e.Key] || e.Reads > truth[e.Key]+bound {
			t.Errorf("%s: %d reads; want within [%d, %d]", e.Key, e.Reads, truth[e.Key], truth[e.Key]+bound)
		}
	}
}

// TestErrorBound: on a deterministic Zipf stream over far more keys than
// Capacity, every reported key's reads are at least its true count and
// at most N/Capacity above it; every key with more than N/Capacity reads
// is reported; and a monitored key's misses are exact or below.
func TestErrorBound(t *testing.T) {
	s := newSummary(&clock{})
	rng := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(rng, 1.1, 1, 100_000)
	const n = 500_000
	truth := map[string]uint64{}
	for range n {
		k := strconv.FormatUint(z.Uint64(), 10)
		s.Add(k, Counts{Reads: 1, Misses: 1})
		truth[k]++
	}
	top := s.Top(Capacity)
	bound := uint64(n / Capacity)
	got := reads(top)
	for _, e := range top {
		if e.Reads < truth[e.Key] || e.Reads > truth[e.Key]+bound {
			t.Errorf("%s: %d reads; true %d, want at most %d above", e.Key, e.Reads, truth[e.Key], bound)
		}
		if e.Misses > truth[e.Key] || e.Misses > e.Reads {
			t.Errorf("%s: %d misses; true %d, %d reads", e.Key, e.Misses, truth[e.Key], e.Reads)
		}
	}
	for k, c := range truth {
		if _, ok := got[k]; c > bound && !ok {
			t.Errorf("%s: %d reads > N/Capacity = %d, not reported", k, c, bound)
		}
	}
	if exact := toMap(top, func(e Entry) uint64 { return e.Misses }); exact["0"] != truth["0"] {
		t.Errorf("hottest key: %d misses; want exactly %d (monitored throughout)", exact["0"], truth["0"])
	}
}

// TestRotation: a report covers the current window and the one before;
// windows are whole minutes from the first Add, however late the calls.
func TestRotation(t *testing.T) {
	c := &clock{t: 1000 * time.Second}
	s := newSummary(c)
	read(s, "a", 5) // window [0, 1m)
	c.advance(59 * time.Second)
	read(s, "b", 3)
	c.advance(31 * time.Second) // 1m30s: window [1m, 2m)
	read(s, "a", 1)
	read(s, "c", 7)
	if got, want := reads(s.Top(10)), map[string]uint64{"a": 6, "b": 3, "c": 7}; !equal(got, want) {
		t.Errorf("at 1m30s: %v; want %v", got, want)
	}
	c.advance(30 * time.Second) // 2m: window [2m, 3m); [0, 1m) is gone
	read(s, "d", 2)
	if got, want := reads(s.Top(10)), map[string]uint64{"a": 1, "c": 7, "d": 2}; !equal(got, want) {
		t.Errorf("at 2m: %v; want %v", got, want)
	}
	c.advance(59 * time.Second) // 2m59s, still [2m, 3m)
	if got, want := reads(s.Top(10)), map[string]uint64{"a": 1, "c": 7, "d": 2}; !equal(got, want) {
		t.Errorf("at 2m59s: %v; want %v", got, want)
	}
	c.advance(time.Second + 90*time.Second) // 4m30s: [4m, 5m), after [3m, 4m) in which nothing was read
	if top := s.Top(10); len(top) != 0 {
		t.Errorf("at 4m30s, after a quiet minute: %v; want nothing", top)
	}
	read(s, "e", 1)
	c.advance(30 * time.Second) // 5m: [5m, 6m)
	if got, want := reads(s.Top(10)), map[string]uint64{"e": 1}; !equal(got, want) {
		t.Errorf("at 5m: %v; want %v", got, want)
	}
}

func equal(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTopArguments: n ≤ 0 reports nothing; n is clipped to Capacity, also
// when the two windows monitor twice as many keys.
func TestTopArguments(t *testing.T) {
	c := &clock{}
	s := newSummary(c)
	if top := s.Top(5); len(top) != 0 {
		t.Errorf("Top of an empty summary = %v; want none", top)
	}
	for i := range Capacity {
		read(s, strconv.Itoa(i), i+1)
	}
	c.advance(Window)
	for i := range Capacity {
		read(s, strconv.Itoa(Capacity+i), Capacity+i+1)
	}
	for _, n := range []int{0, -1} {
		if top := s.Top(n); top != nil {
			t.Errorf("Top(%d) = %v; want nil", n, top)
		}
	}
	if top := s.Top(3); len(top) != 3 || top[0].Key != strconv.Itoa(2*Capacity-1) {
		t.Errorf("Top(3) = %v; want the 3 most read", top)
	}
	if top := s.Top(10 * Capacity); len(top) != Capacity || top[Capacity-1].Key != strconv.Itoa(Capacity) {
		t.Errorf("Top(%d) has %d keys; want the %d most read", 10*Capacity, len(top), Capacity)
	}
}

// TestBoundedMemory: a million distinct keys leave at most Capacity
// monitored per window, and once the windows exist Add allocates nothing,
// a newcomer replacing a key included.
func TestBoundedMemory(t *testing.T) {
	c := &clock{}
	s := newSummary(c)
	keys := make([]string, 1_000_000)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	i := 0
	allocs := testing.AllocsPerRun(len(keys)-1, func() {
		s.Add(keys[i], Counts{Reads: SampleRate})
		i++
		if i%100_000 == 0 {
			c.advance(Window) // rotations reuse the windows' memory
		}
	})
	if allocs != 0 {
		t.Errorf("Add allocates %v times per call; want 0", allocs)
	}
	for _, w := range []*window{s.cur, s.prev} {
		if len(w.slots) > Capacity || len(w.index) > Capacity || cap(w.slots) != Capacity || cap(w.heap) != Capacity {
			t.Errorf("a window holds %d slots (cap %d), %d in its index, heap cap %d; want at most %d",
				len(w.slots), cap(w.slots), len(w.index), cap(w.heap), Capacity)
		}
	}
}

// TestSampled: Sampled picks 1 in SampleRate of any run of numbers, and
// keys read in turn are each sampled about as often, 64 keys included.
func TestSampled(t *testing.T) {
	const n = 64 * 100_000
	for _, keys := range []uint64{1, 2, 3, 7, 64, 100, 1000} {
		per := make([]int, keys)
		total := 0
		for i := uint64(1); i <= n; i++ {
			if Sampled(i) {
				per[i%keys]++
				total++
			}
		}
		if want := n / SampleRate; total < want-10 || total > want+10 {
			t.Errorf("sampled %d of %d; want %d±10", total, n, want)
		}
		want := float64(n) / SampleRate / float64(keys)
		for k, got := range per {
			if d := float64(got) - want; d > 0.05*want+5 || d < -0.05*want-5 {
				t.Errorf("%d keys in turn: key %d sampled %d times; want about %.0f", keys, k, got, want)
				break
			}
		}
	}
}

// TestConcurrentUse: Add and Top from many goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	var s Summary
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10_000 {
				s.Add(strconv.Itoa(i%(100*(g+1))), Counts{Reads: 1, Waits: 1})
				if i%1000 == 0 {
					_ = s.Top(10)
				}
			}
		})
	}
	wg.Wait()
	var sum uint64
	for _, e := range s.Top(Capacity) {
		sum += e.Reads
		if e.Waits > e.Reads {
			t.Errorf("%s: %d waits > %d reads", e.Key, e.Waits, e.Reads)
		}
	}
	if sum != 80_000 {
		t.Errorf("reads sum to %d; want 80000 (Space-Saving keeps the total)", sum)
	}
}

// TestTopOfUnreadSummary: a report of a Cache never read (a debug page or
// a metric polling it) is empty and allocates no window.
func TestTopOfUnreadSummary(t *testing.T) {
	var s Summary
	if top := s.Top(5); top != nil || s.cur != nil || s.prev != nil {
		t.Errorf("Top of an unread Summary = %v, windows allocated %v; want nil, none", top, s.cur != nil)
	}
}
