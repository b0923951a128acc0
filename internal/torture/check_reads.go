package torture

// check_reads.go holds the rules on what reads return: only values that
// were written for their key (phantom), never a value a returned write
// replaced (read-after-write), never older than what the caller saw
// (monotonic).

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// isRead reports whether op returns values.
func isRead(op *Op) bool {
	switch op.Kind {
	case KFetch, KFetchMany, KRefresh, KGet:
		return true
	}
	return false
}

// checkPhantoms: every version a read returns was drawn, for that key,
// by a compute or a Set that began before the read returned.
func (c *checker) checkPhantoms() {
	for _, op := range c.h.Ops {
		if !isRead(op) || op.open() {
			continue
		}
		if strings.Contains(op.Err, "answered with the value of") {
			c.violate("phantom", op.Err, op)
		}
		for _, k := range op.Keys {
			v, ok := op.Vers[k]
			if !ok || v == NotFound {
				continue
			}
			b := c.births[v]
			c.checked["phantom"]++
			switch {
			case b == nil:
				c.violate("phantom", fmt.Sprintf("%s returned version %d, which nobody drew", k, v), op)
			case b.Cfg != op.Cfg || b.Vers[k] != v:
				c.violate("phantom", fmt.Sprintf("%s returned version %d, drawn for another key", k, v), op, b)
			case b.Start > op.End+int64(Slack):
				c.violate("phantom", fmt.Sprintf("%s returned version %d before it was drawn", k, v), op, b)
			}
		}
	}
}

// checkReadAfterWrite: once a Set, Delete or Refresh of a key returned, a
// read of the key that starts later does not return a value that was
// written before the write began. In the writing process at once; in
// another, at its next read of Redis (Fetch may join a flight of its
// process that read Redis before the write), or within NearBound (plus
// the time the servers or the reader were stopped) from a near tier.
func (c *checker) checkReadAfterWrite() {
	for ck, ops := range c.keys {
		var writes []*Op
		since := map[*Op]int64{}
		for _, op := range ops {
			if (op.Kind == KSet || op.Kind == KDelete || op.Kind == KRefresh) && op.ok() {
				writes = append(writes, op)
				since[op] = c.since(op)
			}
		}
		for _, r := range ops {
			v, ok := r.Vers[ck.key]
			if !isRead(r) || r.open() || !ok || v == NotFound {
				continue
			}
			lw := c.lastWrite(v)
			if lw == forever {
				continue
			}
			c.checked["read-after-write"]++
			// Only writes that began after v was last written (since ≤
			// Start) and before r began (a later one cannot bind r) count:
			// writes are sorted by start.
			from := sort.Search(len(writes), func(i int) bool { return writes[i].Start > lw+int64(Slack) })
			for _, w := range writes[from:] {
				if w.Start > r.Start {
					break
				}
				if w == r || lw+int64(Slack) >= since[w] {
					continue
				}
				if !c.bound(r, w.Proc, w.End) {
					if w.Kind != KRefresh { // whose store may have been refused
						c.nearLag(r, w.Proc, w.End)
					}
					continue
				}
				if c.staleRead(r, lw) || w.Proc != r.Proc && (r.Down || c.joined(ck, r, v, w.End) != nil) {
					c.excused["read-after-write"]++
					break
				}
				c.violate("read-after-write", fmt.Sprintf("%s returned version %d, written before a %s that returned before it began",
					ck, v, w.Kind), r, w, c.births[v])
				break
			}
		}
	}
}

// since returns the time from which values written earlier are replaced
// once write w returned: its start; for a Refresh, no later than the birth
// of the value it returned, nor than the start of a Refresh of its
// process it may have joined (a compute that began earlier may have lost
// its lock to a Set meanwhile, whose value is then the newer one).
func (c *checker) since(w *Op) int64 {
	if w.Kind != KRefresh {
		return w.Start
	}
	t := w.Start
	if b := c.births[w.Vers[w.Keys[0]]]; b != nil {
		t = min(t, b.Start)
	}
	for _, l := range c.keys[ckey{w.Cfg, w.Keys[0]}] {
		if l != w && l.Kind == KRefresh && l.Proc == w.Proc && l.Start < w.Start && c.end(l) >= w.Start {
			t = min(t, l.Start)
		}
	}
	return t
}

// checkRefresh: a Refresh that returns a value returns a new one: computed
// by its own compute, or by the compute of another process it waited for,
// or stored by a Set meanwhile, or the result of a Refresh of its process
// that it joined; never one already written before it began.
func (c *checker) checkRefresh() {
	for _, op := range c.h.Ops {
		if op.Kind != KRefresh || !op.ok() {
			continue
		}
		v, ok := op.Vers[op.Keys[0]]
		if !ok || v == NotFound {
			continue
		}
		c.checked["refresh"]++
		// forever (a failed Set's value: it may land any time) must not
		// overflow into the past.
		if lw := c.lastWrite(v); lw != forever && lw+int64(Slack) < op.Start && c.sharedRefresh(op, v) == nil {
			c.violate("refresh", fmt.Sprintf("Refresh of %s returned version %d, written before it began", op.Keys[0], v),
				op, c.births[v])
		}
	}
}

// sharedRefresh returns a Refresh of r's process and key that was running
// when Refresh r began and returned v: concurrent Refresh calls of one
// process share one compute.
func (c *checker) sharedRefresh(r *Op, v int64) *Op {
	for _, l := range c.keys[ckey{r.Cfg, r.Keys[0]}] {
		if l != r && l.Kind == KRefresh && l.Proc == r.Proc && l.Start < r.Start && c.end(l) >= r.Start &&
			l.Vers[r.Keys[0]] == v {
			return l
		}
	}
	return nil
}

// bound reports whether read r began late enough after time t, when a
// write by process proc returned, that it must reflect the write: at once
// in the writing process, else as late says.
func (c *checker) bound(r *Op, proc int, t int64) bool {
	if r.Proc == proc {
		return r.Start > t
	}
	return c.late(r, t)
}

// nearLag notes how long after time t, when a Set or Delete by process
// proc returned, read r still returned a value it replaced: from a near
// tier, within NearBound, which this measures.
func (c *checker) nearLag(r *Op, proc int, t int64) {
	if r.Proc != proc && c.h.Plan.near(r.Cfg, r.Proc) && r.Start > t+int64(Slack) {
		c.lags++
		c.maxLag = max(c.maxLag, time.Duration(r.Start-t))
	}
}

// late reports whether read r began late enough after time t to reflect
// what Redis held at t: after NearBound (and the stops of the servers or
// of r's process meanwhile) from a near tier, else after Slack.
func (c *checker) late(r *Op, t int64) bool {
	if t == forever { // a time never reached: no read is after it
		return false
	}
	if c.h.Plan.near(r.Cfg, r.Proc) {
		return r.Start > t+int64(NearBound)+c.stalls(r.Proc, t, r.Start)
	}
	return r.Start > t+int64(Slack)
}

// joined returns a Fetch or FetchMany of r's process, without a near
// tier, that could have shared its flight with r (see shared). A near
// tier forgets its flights when Redis reports a write, so it gets no such
// excuse.
func (c *checker) joined(ck ckey, r *Op, v, t int64) *Op {
	if c.h.Plan.near(r.Cfg, r.Proc) {
		return nil
	}
	return c.shared(ck, r, v, t)
}

// shared returns a Fetch or FetchMany of r's process that could have
// shared its flight with r, itself a Fetch or FetchMany (a FetchMany's
// missing keys join or start the same flights as Fetch's): it began before
// t, was running when r began, and returned v too. What that flight read
// may be older than r by as long as the flight took, and a process stopped
// mid-flight makes that long.
func (c *checker) shared(ck ckey, r *Op, v, t int64) *Op {
	if r.Kind != KFetch && r.Kind != KFetchMany {
		return nil // a Get or a Refresh joins no Fetch's flight
	}
	for _, l := range c.keys[ck] {
		if l != r && l.Proc == r.Proc && (l.Kind == KFetch || l.Kind == KFetchMany) && l.Start < t+int64(Slack) &&
			c.end(l)+int64(Slack) >= r.Start && l.Vers[ck.key] == v {
			return l
		}
	}
	return nil
}

// A sight is a value a caller saw, proven to have been in Redis by then.
type sight struct {
	op   *Op
	at   int64 // when it was seen and proven stored
	born int64 // when its version was drawn: its write began later
}

// checkMonotonic: a caller (goroutine) that saw a value of a key, proven
// to have been in Redis, never later reads a value whose write ended
// before that one's began, within the bounds of checkReadAfterWrite.
func (c *checker) checkMonotonic() {
	for ck, ops := range c.keys {
		seen := map[[2]int][]sight{} // by process and goroutine
		for _, r := range ops {
			v, ok := r.Vers[ck.key]
			if r.Kind == KCompute || r.open() || r.Err != "" || !ok || v == NotFound || c.births[v] == nil {
				continue
			}
			caller := [2]int{r.Proc, r.G}
			if isRead(r) {
				c.checkSeen(ck, r, v, seen[caller])
			}
			if t, ok := c.stored[v]; ok {
				seen[caller] = append(seen[caller], sight{op: r, at: max(r.End, t), born: c.births[v].Start})
			}
		}
	}
}

// checkSeen checks read r, which returned v, against what its caller saw.
func (c *checker) checkSeen(ck ckey, r *Op, v int64, seen []sight) {
	lw := c.lastWrite(v)
	if lw == forever {
		return
	}
	c.checked["monotonic"]++
	for _, s := range slices.Backward(seen) {
		if lw+int64(Slack) >= s.born || !c.late(r, s.at) {
			continue
		}
		if c.staleRead(r, lw) || c.joined(ck, r, v, s.at) != nil {
			c.excused["monotonic"]++
			return
		}
		c.violate("monotonic", fmt.Sprintf("%s returned version %d to a caller that had seen version %d, written after it",
			ck, v, s.op.Vers[ck.key]), r, s.op)
		return
	}
}
