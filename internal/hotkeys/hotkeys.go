// Package hotkeys keeps, in bounded memory, the most-read keys of a recent
// window and their counts: Space-Saving (Metwally, Agrawal and El Abbadi,
// "Efficient computation of frequent and top-k elements in data streams",
// ICDT 2005) over two windows of a minute each.
//
// A window monitors at most Capacity keys. A key already monitored adds to
// its counts; a newcomer, once the window is full, takes the place of the
// least-read key and inherits its reads. So a key's reads are never
// underestimated while it is monitored, and overestimated by at most the
// window's least count, which is at most W/Capacity, W being the reads the
// window recorded (the counts always sum to W). Its misses, computes and
// waits are not inherited: they count the events since the key last entered
// the window, exactly.
//
// Recording a read takes a mutex and a map lookup, too much for every hit
// of a near tier (about 100 ns): the caller records one hit in SampleRate
// (see Sampled) with a weight of SampleRate, and every rarer event.
package hotkeys

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

const (
	// Capacity is how many keys each window monitors.
	Capacity = 256
	// Window is how long a window lasts. A report covers the current
	// window, begun at most Window ago, and the whole one before it.
	Window = time.Minute
	// SampleRate is one over the share of reads that Sampled selects.
	SampleRate = 1 << sampleBits
	sampleBits = 6
)

// Sampled reports whether the read numbered n (a counter of every read) is
// one of the 1 in SampleRate to record. It takes the top bits of n times
// 2^64/φ, a Weyl sequence: the selected numbers are spread evenly (any
// run of L numbers holds L/SampleRate of them, give or take a few), but
// not periodically, so keys read in turn (a round robin over 64 keys, say)
// are sampled alike instead of the sampling landing on one of them.
func Sampled(n uint64) bool { return n*0x9E3779B97F4A7C15>>(64-sampleBits) == 0 }

// Counts are what a window counts for a key.
type Counts struct {
	Reads, Misses, Computes, Waits uint64
}

func (c *Counts) add(d Counts) {
	c.Reads += d.Reads
	c.Misses += d.Misses
	c.Computes += d.Computes
	c.Waits += d.Waits
}

// An Entry is a key and its counts, as Top reports them.
type Entry struct {
	Key string
	Counts
}

// A Summary holds the current window and the one before it. It is safe for
// concurrent use. The zero value is ready; it allocates its windows at the
// first Add (about 31 KB each; they hold the strings of up to 2×Capacity
// keys) and nothing after, but in Top.
type Summary struct {
	mu        sync.Mutex
	clock     func() time.Duration // tests inject one; nil: the process's monotonic clock (see now)
	start     time.Duration        // the current window's, on the clock
	cur, prev *window              // nil until the first Add
}

// Add adds d to key's counts in the current window.
func (s *Summary) Add(key string, d Counts) { s.AddEach(key, nil, d) }

// AddEach records d for each of keys, under one lock, or for key alone
// if keys is empty: a FetchMany compute counts for every key it computes.
func (s *Summary) AddEach(key string, keys []string, d Counts) {
	t := s.now() // outside the lock, which a hot key's sampled hits share
	s.mu.Lock()
	s.rotate(t)
	if len(keys) == 0 {
		s.cur.add(key, d)
	}
	for _, k := range keys {
		s.cur.add(k, d)
	}
	s.mu.Unlock()
}

// Top returns at most n keys (n is clipped to Capacity) with their counts
// over the current window and the previous one, most reads first (ties in
// key order). A key monitored in only one of them counts that one's: its
// reads in the other, at most that window's least count, are left out.
func (s *Summary) Top(n int) []Entry {
	n = min(n, Capacity)
	if n <= 0 {
		return nil
	}
	t := s.now()
	s.mu.Lock()
	if s.cur == nil { // never read: no window to allocate for a report
		s.mu.Unlock()
		return nil
	}
	s.rotate(t)
	// The current window's slots go first, at their slot's index, so
	// that the previous window's counts of the same key add to them.
	all := make([]Entry, len(s.cur.slots), len(s.cur.slots)+len(s.prev.slots))
	for i, sl := range s.cur.slots {
		all[i] = Entry{Key: sl.key, Counts: sl.Counts}
	}
	for _, sl := range s.prev.slots {
		if i, ok := s.cur.index[sl.key]; ok {
			all[i].add(sl.Counts)
		} else {
			all = append(all, Entry{Key: sl.key, Counts: sl.Counts})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b Entry) int {
		if c := cmp.Compare(b.Reads, a.Reads); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return slices.Clip(all[:min(n, len(all))])
}

// rotate makes the windows match the clock: windows start at multiples of
// Window from the first Add, so the previous window is always the whole
// Window before the current one. Rotating on Add and Top, rather than on a
// timer, costs no goroutine; a quiet minute is caught up at the next call.
func (s *Summary) rotate(t time.Duration) {
	if s.cur == nil {
		s.cur, s.prev, s.start = newWindow(), newWindow(), t
		return
	}
	d := t - s.start
	if d < Window {
		return
	}
	s.prev.reset()
	if d < 2*Window {
		s.cur, s.prev = s.prev, s.cur // the current window ends; the emptied one starts
	} else {
		s.cur.reset() // both windows ended: nothing was read in the last one
	}
	s.start += d / Window * Window
}

// now reads the clock. The default is monotonic only: time.Since reads one
// clock where time.Now reads two, and a sampled hit pays for it. It writes
// nothing, so that Add reads it before taking the lock.
func (s *Summary) now() time.Duration {
	if s.clock != nil {
		return s.clock()
	}
	return time.Since(origin)
}

// origin is the default clock's zero: windows start at the first Add, so
// one origin serves every Summary.
var origin = time.Now()
