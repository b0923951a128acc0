package torture

// check_tags.go holds the rule on InvalidateTag: a value tagged before an
// invalidation of its tag began is not served once it returned.

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// invalidated returns an InvalidateTag of Cache cfg (returned or not: one
// that failed may have reached some values) of one of tags, in progress
// at some time in [from, to].
func (c *checker) invalidated(cfg int, tags []string, from, to int64) *Op {
	for _, op := range c.invals[cfg] {
		if op.Start <= to && c.end(op) >= from && slices.ContainsFunc(op.Tags, func(t string) bool {
			return slices.Contains(tags, t)
		}) {
			return op
		}
	}
	return nil
}

// voidedKey returns an Expire of ck (of a Cache WithStale: see newChecker),
// or an InvalidateTag of ck's Cache of a tag whose set held ck, returned
// or not, in progress at some time in [from, to]: it voided ck's value,
// whatever that value's own tags, and took the compute lock of ck away (a
// key stays in a tag's set until an invalidation of the tag takes the set).
func (c *checker) voidedKey(ck ckey, from, to int64) *Op {
	for _, e := range c.expiry[ck] {
		if e.Start <= to && c.end(e) >= from {
			return e
		}
	}
	for _, w := range c.invals[ck.cfg] {
		if w.Start > to || c.end(w) < from {
			continue
		}
		for _, t := range w.Tags {
			if c.carries(ck, t, w) {
				return w
			}
		}
	}
	return nil
}

// carries reports whether tag t's set may have held key ck when
// invalidation w took it: a compute that tagged ck with t, or a SetTagged
// of ck with t, began before w ended, and no invalidation of t that ended
// before w began took the set after it was added.
func (c *checker) carries(ck ckey, t string, w *Op) bool {
	// An add is popped by an invalidation of t that began after it and
	// ended before w began: it is popped if the latest such start is later.
	popped := int64(math.MinInt64)
	for _, p := range c.invals[ck.cfg] {
		if p != w && p.ok() && p.End < w.Start && slices.Contains(p.Tags, t) {
			popped = max(popped, p.Start)
		}
	}
	// The latest adds first: the likeliest to be later than popped.
	ops := c.keys[ck]
	end := c.end(w)
	for i := sort.Search(len(ops), func(i int) bool { return ops[i].Start > end }) - 1; i >= 0; i-- {
		a := ops[i]
		if !(a.Kind == KCompute || a.Kind == KSet) || !slices.Contains(a.Tags, t) {
			continue
		}
		added := c.end(a)
		if a.Kind == KCompute {
			added = c.storedBy(a)
		}
		if added >= popped {
			return true
		}
	}
	return false
}

// voids reports whether InvalidateTag w voids the value written by b: b
// tagged it with one of w's tags before w began (a compute's Tag returned,
// or a SetTagged returned).
func (c *checker) voids(w, b *Op) bool {
	if !slices.ContainsFunc(w.Tags, func(t string) bool { return slices.Contains(b.Tags, t) }) {
		return false
	}
	if b.Kind == KCompute {
		return b.Tagged != 0 && b.Tagged+int64(Slack) < w.Start
	}
	return b.ok() && b.End+int64(Slack) < w.Start
}

// checkInvalidate: once an InvalidateTag returned, no read that starts
// later returns a value tagged with one of its tags before it began, even
// one stored after it: at once in the invalidating process, in another at
// its next read of Redis (or its near tier within NearBound); on a
// Cluster, where such a value is stored and then removed again, from
// NearBound after its compute's call returned. With WithStale an
// invalidated value is served stale, so such Caches are not judged.
// Excused: a killed master (the invalidation may be lost), or on a
// Cluster a loss of data (the tag's keys and the value's live apart).
func (c *checker) checkInvalidate() {
	for ck, ops := range c.keys {
		if c.h.Plan.Caches[ck.cfg].Stale > 0 || len(c.invals[ck.cfg]) == 0 {
			continue
		}
		for _, r := range ops {
			v, ok := r.Vers[ck.key]
			if !isRead(r) || !r.ok() || !ok || v == NotFound || c.births[v] == nil || len(c.births[v].Tags) == 0 {
				continue
			}
			c.checked["invalidate"]++
			c.checkVoided(ck, r, v)
		}
	}
}

// checkVoided checks read r, which returned v, against the invalidations
// of its Cache.
func (c *checker) checkVoided(ck ckey, r *Op, v int64) {
	b := c.births[v]
	// Only invalidations that began after b (b tagged its value before
	// the ones that void it) and before r (a later one cannot bind r)
	// count: they are sorted by start.
	ws := c.invals[ck.cfg]
	ws = ws[sort.Search(len(ws), func(i int) bool { return ws[i].Start > b.Start }):]
	for _, w := range ws {
		if w.Start > r.Start {
			break
		}
		if !w.ok() || !c.voids(w, b) || !c.bound(r, w.Proc, w.End) {
			continue
		}
		if c.h.Plan.Topology == Cluster && b.Kind == KCompute && !c.late(r, c.storedBy(b)) {
			continue
		}
		loss := rollback
		if c.h.Plan.Topology == Cluster {
			loss = dataLoss
		}
		if c.fault(loss, b.Start, r.End) != nil || w.Proc != r.Proc && c.joined(ck, r, v, w.End) != nil {
			c.excused["invalidate"]++
			return
		}
		c.violate("invalidate", fmt.Sprintf("%s returned version %d, tagged %v before an InvalidateTag of %v that returned before the read began",
			ck, v, b.Tags, w.Tags), r, w, b)
		return
	}
}

// storedBy returns the latest time compute b's value, and its tags, may
// have been stored: when its call returned, after the store. A call that
// returned first (a caller that left, the Fetch that started a background
// refresh) does not bound it: the compute's goroutine stores after compute
// returns, on a context of its own that ends redisutil.CleanupTimeout
// later (and on a Cluster it adds the key to its tags' sets first, a step
// no lock fences).
func (c *checker) storedBy(b *Op) int64 {
	t := c.end(b)
	if via := c.byID[b.Via]; via != nil && c.end(via) >= t {
		return c.end(via)
	}
	return t + int64(redisutil.CleanupTimeout)
}
