package torture

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The checker's rules, each on a hand-made history that breaks it and on
// the same history with what excuses it (or makes it right).

// t0 is the hand-made histories' time origin; at(ms) is ms after it.
const t0 = int64(1_700_000_000) * 1e9

func at(ms float64) int64 { return t0 + int64(ms*float64(time.Millisecond)) }

// testPlan has a plain Cache (c0), one with a near tier in process 3
// (c1), one whose values expire at once (c2), one WithStale (c3), one
// WithStaleIfDown with a near tier in process 3 (c4), one whose values
// are stale at once for 100 ms (c5), one WithStale and WithSoftTimeout
// (c6), and a semaphore of 2 permits.
func testPlan() Plan {
	return Plan{
		Caches: []CacheConfig{
			{Prefix: "t0:", TTL: time.Second},
			{Prefix: "t1:", TTL: time.Second, NearProcs: []int{3}},
			{Prefix: "t2:", TTL: time.Millisecond},
			{Prefix: "t3:", TTL: time.Second, Stale: time.Second},
			{Prefix: "t4:", TTL: time.Second, Stale: time.Second, NearProcs: []int{3}, StaleIfDown: true},
			{Prefix: "t5:", TTL: time.Millisecond, Stale: 100 * time.Millisecond},
			{Prefix: "t6:", TTL: time.Second, Stale: time.Second, Soft: 100 * time.Millisecond},
		},
		Procs: 3, Mutexes: []string{"m"}, Sem: "s", Permits: 2, RW: "rw",
	}
}

var nextID int64

func newOp(kind string, proc, g, cfg int, keys []string, s, e float64) *Op {
	nextID++
	op := &Op{ID: int64(proc)<<32 | nextID, Proc: proc, G: g, Kind: kind, Cfg: cfg, Keys: keys, Start: at(s)}
	if e > 0 {
		op.End = at(e)
	}
	return op
}

// cache returns a cache op of process proc (goroutine 1) on key "k" of
// Cache cfg, returning or writing ver (0: none).
func cache(kind string, proc, cfg int, ver int64, s, e float64) *Op {
	op := newOp(kind, proc, 1, cfg, []string{"k"}, s, e)
	if ver != 0 {
		op.Vers = map[string]int64{"k": ver}
	}
	return op
}

// compute returns a compute of ver for call via.
func compute(via *Op, ver int64, s, e float64) *Op {
	op := cache(KCompute, via.Proc, via.Cfg, ver, s, e)
	op.Via, op.ViaK = via.ID, via.Kind
	return op
}

// section returns a lock section of name with fence.
func section(kind string, proc int, name string, fence int64, s, enter, exit, e float64) *Op {
	op := newOp(kind, proc, 1, 0, []string{name}, s, e)
	op.Enter, op.Exit = at(enter), at(exit)
	op.Fences = map[string]int64{name: fence}
	if kind == KSem {
		op.Weight = 1
	}
	return op
}

func history(ops []*Op, faults ...Fault) *History {
	return &History{Plan: testPlan(), Ops: ops, Faults: faults, Died: map[int]int64{}}
}

func fault(kind string, proc int, s, e float64) Fault {
	return Fault{Kind: kind, Proc: proc, Start: at(s), End: at(e)}
}

// rules returns the rules h breaks, with the excerpts for the log.
func rules(t *testing.T, h *History) []string {
	var rs []string
	for _, v := range Check(h).Violations {
		t.Logf("%s", Excerpt(h, v))
		if !slices.Contains(rs, v.Rule) {
			rs = append(rs, v.Rule)
		}
	}
	return rs
}

func TestRules(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    func() *History
		want []string
	}{
		{"phantom/never drawn", func() *History {
			return history([]*Op{cache(KGet, 1, 0, 99, 0, 1)})
		}, []string{"phantom"}},
		{"phantom/drawn by a Set", func() *History {
			return history([]*Op{cache(KSet, 2, 0, 99, 0, 1), cache(KGet, 1, 0, 99, 2, 3)})
		}, nil},
		{"phantom/another key's value", func() *History {
			g := cache(KGet, 1, 0, 99, 2, 3)
			g.Err = `torture: "k" answered with the value of "j"`
			return history([]*Op{cache(KSet, 2, 0, 99, 0, 1), g})
		}, []string{"phantom"}},
		{"read-after-write/another process", func() *History {
			return history(readAfterWrite(0))
		}, []string{"read-after-write"}},
		{"read-after-write/excused by a failover's rollback", func() *History {
			return history(readAfterWrite(0), fault(FKillMaster, 0, 7, 8))
		}, nil},
		{"read-after-write/excused during a graceful failover", func() *History {
			return history(readAfterWrite(0), fault(FFailover, 0, 4, 10.5))
		}, nil},
		{"read-after-write/after a graceful failover", func() *History {
			return history(readAfterWrite(0), fault(FFailover, 0, 4, 9))
		}, []string{"read-after-write"}},
		{"read-after-write/near tier within its bound", func() *History {
			return history(readAfterWrite(1))
		}, nil},
		{"read-after-write/near tier past its bound", func() *History {
			ops := readAfterWrite(1)
			ops[3].Start, ops[3].End = at(600), at(601)
			return history(ops)
		}, []string{"read-after-write"}},
		{"read-after-write/joined an older flight", func() *History {
			ops := readAfterWrite(0)
			return history(append(ops, cache(KFetch, 3, 0, 1, 4, 12)))
		}, nil},
		{"read-after-write/joined an older FetchMany's flight", func() *History {
			ops := readAfterWrite(0)
			return history(append(ops, cache(KFetchMany, 3, 0, 1, 4, 12)))
		}, nil},
		{"read-after-write/a FetchMany that began after the write", func() *History {
			ops := readAfterWrite(0)
			return history(append(ops, cache(KFetchMany, 3, 0, 1, 9, 12)))
		}, []string{"read-after-write"}},
		{"read-after-write/a Refresh that joined one older than a Set", func() *History {
			l := cache(KRefresh, 1, 0, NotFound, 0, 30)
			c := compute(l, 9, 0.5, 29)
			c.Err = notFoundText
			return history([]*Op{l, c, cache(KSet, 2, 0, 1, 5, 6), cache(KRefresh, 1, 0, NotFound, 10, 30),
				cache(KGet, 2, 0, 1, 40, 41)})
		}, nil},
		{"previous/the value it replaces", func() *History { return history(previous(1)) }, nil},
		{"previous/never drawn", func() *History { return history(previous(99)) }, []string{"previous"}},
		{"previous/another key's", func() *History {
			j := newOp(KSet, 1, 1, 0, []string{"j"}, 0, 1)
			j.Vers = map[string]int64{"j": 7}
			return history(append(previous(7), j))
		}, []string{"previous"}},
		{"previous/drawn after the compute began", func() *History {
			return history(append(previous(8), cache(KSet, 1, 0, 8, 10, 11)))
		}, []string{"previous"}},
		{"expiry/within its TTL", func() *History { return history(expiry(0, 990)) }, nil},
		{"expiry/past its TTL", func() *History { return history(expiry(0, 1010)) }, []string{"expiry"}},
		{"expiry/joined a flight that read it in time", func() *History {
			// Process 2 stopped mid-flight: its Fetch from 900 to 1500
			// read version 1 in time; another Fetch joined it at 1200.
			ops := expiry(0, 1200)
			ops[1].Kind = KFetch
			return history(append(ops, cache(KFetch, 2, 0, 1, 900, 1500)))
		}, nil},
		{"expiry/a Get past its TTL beside a flight", func() *History {
			return history(append(expiry(0, 1200), cache(KFetch, 2, 0, 1, 900, 1500)))
		}, []string{"expiry"}},
		{"expiry/within its stale window", func() *History { return history(expiry(3, 1990)) }, nil},
		{"expiry/past its stale window", func() *History { return history(expiry(3, 2010)) }, []string{"expiry"}},
		{"expiry/within its soft timeout", func() *History { return history(expiry(6, 2090)) }, nil},
		{"expiry/past its soft timeout", func() *History { return history(expiry(6, 2110)) }, []string{"expiry"}},
		{"stale-if-down/a kept copy while the server was stopped", func() *History {
			return history(staleIfDown(4), fault(FPause, 0, 7, 9))
		}, nil},
		{"stale-if-down/within DownBound of the fault", func() *History {
			return history(staleIfDown(4), fault(FPause, 0, -2500, 10+10-float64(DownBound/time.Millisecond)))
		}, nil},
		{"stale-if-down/past DownBound of the fault", func() *History {
			return history(staleIfDown(4), fault(FPause, 0, -2500, 10-10-float64(DownBound/time.Millisecond)))
		}, []string{"stale-if-down"}},
		{"stale-if-down/with no fault", func() *History { return history(staleIfDown(4)) }, []string{"stale-if-down"}},
		{"stale-if-down/without the option", func() *History {
			return history(staleIfDown(1), fault(FPause, 0, 7, 9))
		}, []string{"stale-if-down"}},
		{"stale-if-down/older than a write of its own process", func() *History {
			ops := staleIfDown(4)
			ops[2].Proc = 3
			return history(ops, fault(FPause, 0, 7, 9))
		}, []string{"read-after-write"}},
		{"monotonic", func() *History { return history(monotonic()) }, []string{"monotonic"}},
		{"monotonic/excused by a failover's rollback", func() *History {
			return history(monotonic(), fault(FKillMaster, 0, 12, 13))
		}, nil},
		{"refresh/returned an old value", func() *History {
			return history([]*Op{cache(KSet, 1, 0, 1, 0, 1), cache(KRefresh, 2, 0, 1, 5, 8)})
		}, []string{"refresh"}},
		{"refresh/shared a Refresh of its process", func() *History { return history(sharedRefresh(2)) }, nil},
		{"refresh/a Refresh of another process", func() *History {
			return history(sharedRefresh(4))
		}, []string{"refresh"}},
		{"refresh/a failed Set's value, begun after it", func() *History {
			// Seed 4874054713374990276: the Set failed (a master killed), so
			// its value's last write is unknown; it began after the Refresh.
			w := cache(KSet, 1, 0, 3, 6, 9)
			w.Err = "EOF"
			return history([]*Op{cache(KSet, 1, 0, 1, 0, 1), cache(KRefresh, 2, 0, 3, 5, 8), w})
		}, nil},
		{"refresh/returned its own", func() *History {
			r := cache(KRefresh, 2, 0, 2, 5, 8)
			return history([]*Op{cache(KSet, 1, 0, 1, 0, 1), r, compute(r, 2, 5.5, 7)})
		}, nil},
		{"compute-overlap", func() *History { return history(overlap()) }, []string{"compute-overlap"}},
		{"compute-overlap/excused by a Delete", func() *History {
			return history(append(overlap(), cache(KDelete, 3, 0, 0, 2, 3)))
		}, nil},
		{"compute-overlap/excused by a stopped process", func() *History {
			return history(overlap(), fault(FPauseProc, 1, 2, 3))
		}, nil},
		{"compute-overlap/excused by a Delete before the later compute began", func() *History {
			// b's call took the lock at 0, a Delete took it away at 1, a's
			// call took it at 2; b's compute only began at 3.
			a, b := cache(KFetch, 1, 0, 1, 2, 11), cache(KFetch, 2, 0, 2, 0, 13)
			return history([]*Op{a, compute(a, 1, 2.5, 10), b, compute(b, 2, 3, 12), cache(KDelete, 3, 0, 0, 1, 1.5)})
		}, nil},
		{"read-after-write/an Expire without WithStale is a Delete", func() *History {
			return history(expired(0))
		}, []string{"read-after-write"}},
		{"read-after-write/an Expire with WithStale leaves the value, stale", func() *History {
			return history(expired(3))
		}, nil},
		{"compute-overlap/excused by an Expire without WithStale", func() *History {
			return history(append(overlap(), cache(KExpire, 3, 0, 0, 2, 3)))
		}, nil},
		{"compute-overlap/in a WithStale Cache", func() *History { return history(onCache(3, overlap())) }, []string{"compute-overlap"}},
		{"compute-overlap/excused by an Expire with WithStale", func() *History {
			return history(onCache(3, append(overlap(), cache(KExpire, 3, 0, 0, 2, 3))))
		}, nil},
		{"compute-fresh", func() *History { return history(computeFresh()) }, []string{"compute-fresh"}},
		{"compute-fresh/excused by a Delete", func() *History {
			return history(append(computeFresh(), cache(KDelete, 3, 0, 0, 25, 26)))
		}, nil},
		{"compute-fresh/excused by FLUSHALL", func() *History {
			return history(computeFresh(), fault(FFlushAll, 0, 25, 26))
		}, nil},
		{"compute-fresh/excused by a tag kept from a compute that outlived its call", func() *History {
			// Process 1's call leaves at 5; its compute, tagged "t", returns
			// at 20 and stores (its key into "t"'s set first) after an
			// invalidation of "t" began at 20.01. Process 2's Set then
			// writes version 2 with no tag, and the next invalidation of
			// "t" voids it: the key stayed in the set, as documented.
			a := cache(KFetch, 1, 0, 0, 0, 5)
			a.Err = "context deadline exceeded"
			c := compute(a, 1, 1, 20)
			c.Tags, c.Tagged = []string{"t"}, at(2)
			w1, w2 := newOp(KInval, 3, 1, 0, nil, 20.01, 21), newOp(KInval, 3, 1, 0, nil, 40, 41)
			w1.Tags, w2.Tags = []string{"t"}, []string{"t"}
			b := cache(KFetch, 2, 0, 3, 50, 60)
			return history([]*Op{a, c, w1, cache(KSet, 2, 0, 2, 30, 31), w2, cache(KGet, 3, 0, 2, 35, 36), b, compute(b, 3, 51, 55)})
		}, nil},
		{"compute-fresh/WithStale, within the clock estimate's error", func() *History {
			return history(staleRefresh(995)) // 15 ms before the TTL ends
		}, nil},
		{"compute-fresh/WithStale, before it", func() *History {
			return history(staleRefresh(980))
		}, []string{"compute-fresh"}},
		{"compute-fresh/not shown stored", func() *History {
			ops := computeFresh()
			return history(slices.Delete(ops, 2, 3))
		}, nil},
		{"invalidate", func() *History { return history(invalidate(0, 2)) }, []string{"invalidate"}},
		{"invalidate/tagged after it began", func() *History { return history(invalidate(0, 30.5)) }, nil},
		{"invalidate/served stale", func() *History { return history(invalidate(3, 2)) }, nil},
		{"invalidate/excused by a failover's rollback", func() *History {
			return history(invalidate(0, 2), fault(FKillMaster, 0, 35, 36))
		}, nil},
		{"exclusion", func() *History { return history(exclusion(KMutex, KFair)) }, []string{"exclusion"}},
		{"exclusion/readers together", func() *History { return history(exclusion(KRLock, KRLock)) }, nil},
		{"exclusion/reader and writer", func() *History { return history(exclusion(KRLock, KWLock)) }, []string{"exclusion"}},
		{"exclusion/excused by a stopped holder", func() *History {
			return history(exclusion(KMutex, KMulti), fault(FPauseProc, 1, 12, 25))
		}, nil},
		{"exclusion/excused by a holder stopped before it entered", func() *History {
			// Process 2 was granted the lock at 1, stopped from 2 to 18,
			// and entered at 19, after process 1 had taken the lapsed lock.
			return history([]*Op{section(KFair, 1, "m", 2, 5, 10, 30, 31), section(KMutex, 2, "m", 1, 0, 19, 20, 21)},
				fault(FPauseProc, 2, 2, 18))
		}, nil},
		{"exclusion/excused by a holder that ran late all through the overlap", func() *History {
			return history(append(lateExit(), stall(1, 12, 40), stall(1, 45, 65)))
		}, nil},
		{"exclusion/a stall of the holder's before the overlap", func() *History {
			return history(append(lateExit(), stall(1, 12, 19)))
		}, []string{"exclusion"}},
		{"exclusion/the holder ran during the overlap", func() *History {
			return history(append(lateExit(), stall(1, 15, 40), stall(1, 55, 70)))
		}, []string{"exclusion"}},
		{"exclusion/a stall of another process", func() *History {
			return history(append(lateExit(), stall(3, 10, 70)))
		}, []string{"exclusion"}},
		{"exclusion/a holder killed, reaped later", func() *History {
			// Seed 13326442740694002039: process 1 was sent SIGKILL at 12,
			// inside its section, and reaped at 25; process 2 entered at 20.
			ops := exclusion(KRLock, KWLock)
			ops[0].Exit, ops[0].End = 0, 0
			h := history(ops, fault(FKillProc, 1, 12, 26))
			h.Died[1] = at(25)
			return h
		}, nil},
		{"semaphore", func() *History {
			return history([]*Op{
				section(KSem, 1, "s", 1, 0, 1, 30, 31),
				section(KSem, 2, "s", 2, 0, 2, 30, 31),
				section(KSem, 3, "s", 3, 0, 3, 30, 31),
			})
		}, []string{"semaphore"}},
		{"semaphore/one after another", func() *History {
			return history([]*Op{
				section(KSem, 1, "s", 1, 0, 1, 2, 3),
				section(KSem, 2, "s", 2, 0, 2, 30, 31),
				section(KSem, 3, "s", 3, 0, 3, 30, 31),
			})
		}, nil},
		{"fence/not above an earlier grant", func() *History {
			return history([]*Op{section(KMutex, 1, "m", 5, 0, 1, 2, 3), section(KMutex, 2, "m", 4, 10, 11, 12, 13)})
		}, []string{"fence"}},
		{"fence/twice", func() *History {
			return history([]*Op{section(KMutex, 1, "m", 5, 0, 1, 2, 3), section(KMutex, 2, "m", 5, 0, 4, 5, 6)})
		}, []string{"fence"}},
		{"fence/across a killed master", func() *History {
			return history([]*Op{section(KMutex, 1, "m", 5, 0, 1, 2, 3), section(KMutex, 2, "m", 5, 10, 11, 12, 13)},
				fault(FKillMaster, 0, 4, 9))
		}, []string{"fence"}},
		{"fence/excused by a split brain", func() *History {
			return history([]*Op{section(KMutex, 1, "m", 5, 0, 1, 2, 3), section(KMutex, 2, "m", 5, 10, 11, 12, 13)},
				fault(FSplitBrain, 0, 4, 9))
		}, nil},
		{"fence/asked for at once", func() *History {
			return history([]*Op{section(KMutex, 1, "m", 5, 0, 1, 2, 3), section(KMutex, 2, "m", 4, 0, 4, 5, 6)})
		}, nil},
		{"leak", func() *History {
			h := history(nil)
			h.Leaks = map[int]string{1: "found unexpected goroutines"}
			return h
		}, []string{"leak"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := rules(t, tt.h()); !slices.Equal(got, tt.want) {
				t.Errorf("violations of %v; want %v", got, tt.want)
			}
		})
	}
}

// readAfterWrite: process 1 sets version 1, process 2 sets version 2, and
// process 3 reads version 1 (from Cache cfg) after that returned.
func readAfterWrite(cfg int) []*Op {
	return []*Op{
		cache(KSet, 1, cfg, 1, 0, 1),
		cache(KGet, 1, cfg, 1, 2, 3),
		cache(KSet, 2, cfg, 2, 5, 6),
		cache(KFetch, 3, cfg, 1, 10, 11),
	}
}

// expired: a Set, then an Expire by another process, then a third process
// reads the Set's value, on Cache cfg.
func expired(cfg int) []*Op {
	return []*Op{cache(KSet, 1, cfg, 1, 0, 1), cache(KExpire, 2, cfg, 0, 5, 6), cache(KFetch, 3, cfg, 1, 10, 11)}
}

// onCache moves ops to Cache cfg.
func onCache(cfg int, ops []*Op) []*Op {
	for _, op := range ops {
		op.Cfg = cfg
	}
	return ops
}

// monotonic: a caller sees version 2, computed by another process, then
// version 1, written before version 2 was drawn (and expired at once).
// previous: a Set of version 1, then a Refresh whose compute Previous
// gave prev.
func previous(prev int64) []*Op {
	r := cache(KRefresh, 2, 0, 2, 4, 8)
	c := compute(r, 2, 5, 7)
	c.Prev = prev
	return []*Op{cache(KSet, 1, 0, 1, 0, 1), r, c}
}

// expiry: a Set of version 1 on Cache cfg (TTL 1 s), and a Get of it
// that starts ms in.
func expiry(cfg int, ms float64) []*Op {
	return []*Op{cache(KSet, 1, cfg, 1, 0, 1), cache(KGet, 2, cfg, 1, ms, ms+1)}
}

// staleIfDown: process 3's near tier of Cache cfg holds version 1; a Set
// of version 2 in process 1; process 3's Fetch answered with its kept
// copy of version 1 at 10 ms.
func staleIfDown(cfg int) []*Op {
	f := cache(KFetch, 3, cfg, 1, 10, 11)
	f.Down = true
	return []*Op{cache(KSet, 1, cfg, 1, 0, 1), cache(KGet, 3, cfg, 1, 2, 3), cache(KSet, 1, cfg, 2, 5, 6), f}
}

func monotonic() []*Op {
	f := cache(KFetch, 2, 5, 2, 4, 7)
	return []*Op{
		cache(KSet, 3, 5, 1, 0, 1),
		f, compute(f, 2, 5, 6),
		cache(KFetch, 1, 5, 2, 10, 11),
		cache(KGet, 1, 5, 1, 20, 21),
	}
}

// sharedRefresh: process 2 refreshes the key, process 3 reads the new
// value, and process proc refreshes it too, returning that value, while
// process 2's Refresh is still running.
func sharedRefresh(proc int) []*Op {
	r := cache(KRefresh, 2, 0, 2, 4, 10)
	return []*Op{r, compute(r, 2, 4.5, 6), cache(KGet, 3, 0, 2, 6.5, 7), cache(KRefresh, proc, 0, 2, 9.5, 10)}
}

// overlap: processes 1 and 2 compute the key at once.
func overlap() []*Op {
	a, b := cache(KFetch, 1, 0, 1, 0, 11), cache(KFetch, 2, 0, 2, 3, 13)
	return []*Op{a, compute(a, 1, 1, 10), b, compute(b, 2, 4, 12)}
}

// computeFresh: process 2 computes the key 30 ms after process 1 stored
// it for a second (process 3 read it).
func computeFresh() []*Op {
	a, b := cache(KFetch, 1, 0, 1, 0, 20), cache(KFetch, 2, 0, 2, 30, 50)
	return []*Op{a, compute(a, 1, 1, 10), cache(KGet, 3, 0, 1, 21, 22), b, compute(b, 2, 31, 40)}
}

// staleRefresh: process 1 computes version 1 of a WithStale Cache's key
// (stored by 10 ms, fresh for 1 s), and a Fetch of process 2 that starts
// ms milliseconds in returns it and refreshes it in the background:
// version 2.
func staleRefresh(ms float64) []*Op {
	a, b := cache(KFetch, 1, 3, 1, 0, 20), cache(KFetch, 2, 3, 1, ms, ms+1)
	return []*Op{a, compute(a, 1, 1, 10), cache(KGet, 3, 3, 1, 21, 22), b, compute(b, 2, ms+1.5, ms+5)}
}

// invalidate: process 1 computes version 1 tagged "t", process 2
// invalidates "t", and process 3 reads version 1 after that returned.
func invalidate(cfg int, tagged float64) []*Op {
	a := cache(KFetch, 1, cfg, 1, 0, 20)
	c := compute(a, 1, 1, 10)
	c.Tags, c.Tagged = []string{"t"}, at(tagged)
	w := newOp(KInval, 2, 1, cfg, nil, 30, 31)
	w.Tags = []string{"t"}
	return []*Op{a, c, w, cache(KGet, 3, cfg, 1, 40, 41)}
}

// exclusion: two sections of one name, of kinds a and b, overlap.
// lateExit: process 1 leaves its section at 80 ms, 60 ms after process 2
// entered.
func lateExit() []*Op {
	return []*Op{section(KMutex, 1, "m", 1, 0, 10, 80, 81), section(KFair, 2, "m", 2, 5, 20, 90, 91)}
}

// stall: process proc's goroutines ran late from s to e (ms).
func stall(proc int, s, e float64) *Op { return newOp(KStall, proc, 0, 0, nil, s, e) }

func exclusion(a, b string) []*Op {
	name := "m"
	if strings.HasSuffix(a, "lock") {
		name = "rw"
	}
	return []*Op{section(a, 1, name, 1, 0, 10, 30, 31), section(b, 2, name, 2, 5, 20, 40, 41)}
}

// TestFixedDefectsFail: the histories of the defects this checker found
// (all fixed) are violations of their rules, known as no open defect: a
// regression fails the run.
func TestFixedDefectsFail(t *testing.T) {
	for _, tt := range []struct {
		name string
		h    func() *History
		want string
	}{
		{"refresh-refused", func() *History {
			r := cache(KRefresh, 2, 0, 2, 5, 20)
			c := compute(r, 2, 6, 19)
			c.Tags, c.Tagged = []string{"t"}, at(7)
			w := newOp(KInval, 3, 1, 0, nil, 10, 11)
			w.Tags = []string{"t"}
			return history([]*Op{cache(KSet, 1, 0, 1, 0, 1), r, c, w, cache(KGet, 2, 0, 1, 30, 31)})
		}, ""},
		{"refresh-refused/lease lapsed", func() *History {
			r := cache(KRefresh, 2, 0, 2, 5, 20)
			return history([]*Op{cache(KSet, 1, 0, 1, 0, 1), r, compute(r, 2, 6, 9), cache(KGet, 2, 0, 1, 30, 31)},
				fault(FPause, 0, 9.5, 19))
		}, ""},
		{"invalidate-flight", func() *History {
			ops := invalidate(0, 2)
			ops[3].Proc, ops[3].Kind = 1, KFetch // read in the computing process, through its flight
			return history(ops)
		}, ""},
		{"invalidate-concurrent", func() *History {
			ops := invalidate(0, 2)
			w := newOp(KInval, 1, 2, 0, nil, 29, 35)
			w.Tags = []string{"t"}
			return history(append(ops, w))
		}, ""},
		{"a new defect", func() *History { return history(invalidate(0, 2)) }, ""},
		{"a new defect of Refresh", func() *History {
			return history([]*Op{cache(KSet, 1, 0, 1, 0, 1), cache(KRefresh, 2, 0, 1, 5, 8)})
		}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Check(tt.h())
			if len(v.Violations) == 0 {
				t.Fatal("no violation")
			}
			for _, x := range v.Violations {
				if x.Known != tt.want {
					t.Errorf("%s: known as %q; want %q\n%s", x.Rule, x.Known, tt.want, Excerpt(tt.h(), x))
				}
			}
		})
	}
}
