package torture

// check_computes.go holds the rules on computes: one at a time per key in
// the fleet (compute-overlap), and none while the key holds a fresh value
// (compute-fresh).

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/dogpile-go/dogpile/internal/servertime"
)

// notFoundText is dogpile.ErrNotFound's message, as a compute op records it.
const notFoundText = "dogpile: not found"

// computes returns the compute ops among ops.
func computes(ops []*Op) []*Op {
	var cs []*Op
	for _, op := range ops {
		if op.Kind == KCompute {
			cs = append(cs, op)
		}
	}
	return cs
}

// write returns a Set or Delete of ck (returned or not) in progress at
// some time in [from, to]: it takes the compute lock away.
func (c *checker) write(ck ckey, kinds []string, from, to int64) *Op {
	in := func(op *Op) bool { return slices.Contains(kinds, op.Kind) && op.Start <= to && c.end(op) >= from }
	ix := c.writes[ck]
	if ix == nil {
		return nil
	}
	for _, op := range ix.open {
		if in(op) {
			return op
		}
	}
	// A write that returned and began before from-longest ended before from.
	lo := sort.Search(len(ix.done), func(i int) bool { return ix.done[i].Start >= from-ix.longest })
	for _, op := range ix.done[lo:] {
		if op.Start > to {
			break
		}
		if in(op) {
			return op
		}
	}
	return nil
}

// A writeIndex holds the Sets and Deletes of a key for write: those that
// returned, by start, with the longest time one took, and those that
// never returned.
type writeIndex struct {
	done    []*Op
	longest int64
	open    []*Op
}

func (ix *writeIndex) add(op *Op) {
	if op.open() {
		ix.open = append(ix.open, op)
		return
	}
	ix.done = append(ix.done, op)
	ix.longest = max(ix.longest, op.End-op.Start)
}

// locked returns the earliest time compute op may have taken its compute
// lock: when the call whose compute function it is began. (A compute
// starts after its lock was taken, a goroutine switch or more later: a
// Set may have taken the lock away in between.)
func (c *checker) locked(op *Op) int64 {
	if via := c.byID[op.Via]; via != nil {
		return via.Start
	}
	return op.Start
}

// checkComputeOverlap: two computes of one key never run at once, in one
// process or two, unless one of them lost its compute lock to a Set or
// Delete, an InvalidateTag, a fault of the server, or a stop of its
// process. The later one may have lost it before it began computing (its
// lock taken between the reply and the compute, the first then took the
// lock): the window starts at the earlier of the two lock times.
func (c *checker) checkComputeOverlap() {
	for ck, ops := range c.keys {
		cs := computes(ops)
		c.checked["compute-overlap"] += len(cs)
		for i, a := range cs {
			for _, b := range cs[i+1:] {
				if b.Start+int64(Slack) >= c.end(a) {
					break
				}
				from := min(c.locked(a), c.locked(b))
				if c.write(ck, []string{KSet, KDelete}, from, b.Start) != nil || c.voidedKey(ck, from, b.Start) != nil {
					continue
				}
				if c.fault(lockLoss, from, b.Start) != nil || c.paused(a.Proc, from, b.Start) != nil || c.paused(b.Proc, from, b.Start) != nil {
					c.excused["compute-overlap"]++
					continue
				}
				c.violate("compute-overlap", fmt.Sprintf("two computes of %s at once", ck), a, b)
			}
		}
	}
}

// A fill is a value (or not-found tombstone) known to be stored, and a
// time until which it is known to be fresh.
type fill struct {
	op    *Op   // the Set, or the compute
	low   int64 // stored no earlier than this
	from  int64 // a compute lock taken later is taken after the store
	until int64 // and fresh until at least this
}

// fresh is how long after its store a value stored for d is certainly
// served without a compute: d, or two thirds of it with WithEarlyRefresh
// (whose refresh point is at most a third of the TTL before expiry); with
// WithStale or WithEarlyRefresh, less servertime.Slack, for a hit judges
// the value's age by an estimate of the server's clock that errs early by
// up to that much ("at most 22 ms" in docs/design.md, "The server's clock").
func fresh(cfg CacheConfig, d time.Duration) int64 {
	if cfg.Early > 0 {
		d = d * 2 / 3
	}
	if cfg.Early > 0 || cfg.Stale > 0 {
		d -= servertime.Slack
	}
	return int64(d)
}

// fills returns the stores of ck that the history proves: Sets that
// returned, and computes whose call returned their value (seen in Redis
// too) or their not-found, with no Set, Delete, InvalidateTag or fault
// that could have refused the store.
func (c *checker) fills(ck ckey, ops []*Op) []fill {
	cfg := c.h.Plan.Caches[ck.cfg]
	var fs []fill
	made := map[int64]int{} // the computes of each call
	for _, op := range ops {
		if op.Kind == KCompute {
			made[op.Via]++
		}
	}
	for _, op := range ops {
		if op.Kind == KSet && op.ok() {
			// Stored by the time it returned, for its TTL from no earlier
			// than its start.
			fs = append(fs, fill{op, op.Start, op.End, op.Start + fresh(cfg, cfg.TTL)})
		}
		if op.Kind != KCompute || op.open() {
			continue
		}
		via := c.byID[op.Via]
		if via == nil || !via.ok() || made[via.ID] != 1 {
			continue
		}
		if c.write(ck, []string{KSet, KDelete}, via.Start, via.End) != nil || c.voidedKey(ck, via.Start, via.End) != nil ||
			c.invalidated(ck.cfg, op.Tags, op.Start, via.End) != nil ||
			c.fault(lockLoss, via.Start, via.End) != nil || c.paused(op.Proc, via.Start, via.End) != nil {
			continue
		}
		got, want := via.Vers[ck.key], op.Vers[ck.key]
		_, stored := c.stored[want]
		switch {
		// A value whose Tag failed is returned but not stored: only one
		// seen where its compute's process could not have been handed it
		// was.
		case op.Err == "" && got == want && want != 0 && stored:
			fs = append(fs, fill{op, via.Start, op.End, op.End + fresh(cfg, cfg.TTL)})
		case cfg.Neg > 0 && got == NotFound && (op.Err == notFoundText || op.Err == "" && via.Kind == KFetchMany):
			fs = append(fs, fill{op, via.Start, op.End, op.End + fresh(cfg, cfg.Neg)})
		}
	}
	return fs
}

// dropped returns a compute of ck that found nothing, and so replaced
// the value with nothing (a value found not to exist any more is not
// served stale) or with a tombstone of WithNegativeTTL, which is fresh
// for less long, under a compute lock taken after from and released
// before to.
func (c *checker) dropped(ck ckey, from, to int64) *Op {
	ops := c.keys[ck]
	for _, op := range ops[sort.Search(len(ops), func(i int) bool { return ops[i].Start > from }):] {
		if op.Start >= to {
			break
		}
		if op.Kind == KCompute && op.Err == notFoundText {
			return op
		}
	}
	return nil
}

// checkComputeFresh: no compute of a key (but by Refresh, which computes
// on purpose) takes the compute lock while the key holds a fresh value or
// tombstone, unless a Delete or a loss of the server's data removed it.
func (c *checker) checkComputeFresh() {
	for ck, ops := range c.keys {
		fs := c.fills(ck, ops)
		for _, b := range computes(ops) {
			if b.ViaK == KRefresh {
				continue
			}
			c.checked["compute-fresh"]++
			for _, f := range fs {
				if f.op == b || c.locked(b) <= f.from+int64(Slack) || b.Start+int64(Slack) >= f.until {
					continue
				}
				// The lock was taken after the store, and before the compute
				// began: no Delete, drop or loss may fall in between.
				if c.write(ck, []string{KDelete}, f.low, b.Start) != nil || c.dropped(ck, f.low, b.Start) != nil ||
					c.voidedKey(ck, f.low, b.Start) != nil {
					continue
				}
				if c.fault(dataLoss, f.low, b.Start) != nil {
					c.excused["compute-fresh"]++
					break
				}
				c.violate("compute-fresh", fmt.Sprintf("a compute of %s %v after a store fresh for %v",
					ck, time.Duration(b.Start-f.from), time.Duration(f.until-f.from)), b, f.op)
				break
			}
		}
	}
}
