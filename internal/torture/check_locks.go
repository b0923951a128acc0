package torture

// check_locks.go holds the rules on locks: holders of one name exclude
// each other (exclusion), a semaphore never grants more than its permits
// (semaphore), and fencing numbers never repeat and grow with the order
// of acquisition (fence).

import (
	"fmt"
	"sort"
	"time"
)

// conflicts reports whether sections a and b of one name exclude each
// other: any two holders of a mutex name (plain, fair or in a
// MultiMutex), a writer and anyone of an RWMutex. Semaphores count.
func conflicts(a, b *Op) bool {
	if a.Kind == KSem || b.Kind == KSem {
		return false
	}
	return a.Kind != KRLock || b.Kind != KRLock
}

// byEnter returns ops sorted by when they were acquired.
func byEnter(ops []*Op) []*Op {
	s := append([]*Op(nil), ops...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Enter < s[j].Enter })
	return s
}

// lapsed reports whether a's lease may have ended in Redis by time t
// without a knowing: a's process was stopped (Done could not close in
// time), or the server lost its data (the lock with it). The lease may
// have been granted as early as the call began: a process stopped between
// the grant and its entering the section enters with a lapsed lease.
func (c *checker) lapsed(a *Op, t int64) bool {
	return c.paused(a.Proc, a.Start, t) != nil || c.fault(dataLoss, a.Start, t) != nil
}

// stallExit is how long after its process's stall ended a goroutine may
// take to see its lease's Done and leave its section.
const stallExit = 20 * time.Millisecond

// checkExclusion: two conflicting holders of one name are never inside
// their sections at once, unless one's lease may have ended without it
// knowing (the later one's before it entered), or the earlier one's
// process ran late (see KStall) from when the later one entered until it
// left, but for stallExit: its goroutine saw Done close late, as a
// stopped one would. A section ends when its hold
// is over or its lease's Done closes, whichever is first; Done closes
// before the lease can expire in Redis.
func (c *checker) checkExclusion() {
	seen := map[[2]*Op]bool{} // a MultiMutex's pairs show up under each name
	for _, ops := range c.names {
		secs := byEnter(ops)
		c.checked["exclusion"] += len(secs)
		for i, a := range secs {
			for _, b := range secs[i+1:] {
				if b.Enter+int64(Slack) >= c.exit(a) {
					break
				}
				if !conflicts(a, b) || seen[[2]*Op{a, b}] {
					continue
				}
				if c.lapsed(a, b.Enter) || c.lapsed(b, b.Enter) || c.stalled(a.Proc, b.Enter, c.exit(a)-int64(stallExit)) {
					c.excused["exclusion"]++
					continue
				}
				seen[[2]*Op{a, b}] = true
				c.violate("exclusion", fmt.Sprintf("%s and %s held %v at once", a.Kind, b.Kind, a.Keys), a, b)
			}
		}
	}
}

// checkSemaphore: the permits held at once never exceed the semaphore's
// size, but for holders whose lease may have ended without their knowing.
func (c *checker) checkSemaphore() {
	secs := byEnter(c.names[c.h.Plan.Sem])
	c.checked["semaphore"] += len(secs)
	for i, b := range secs {
		var held int64
		var holders []*Op
		excused := false
		for _, a := range secs[:i+1] {
			if b.Enter+int64(Slack) >= c.exit(a) {
				continue
			}
			if a != b && (c.lapsed(a, b.Enter) || c.stalled(a.Proc, b.Enter, c.exit(a)-int64(stallExit))) {
				excused = true
				continue
			}
			held += a.Weight
			holders = append(holders, a)
		}
		if excused {
			c.excused["semaphore"]++
		}
		if held > c.h.Plan.Permits {
			c.violate("semaphore", fmt.Sprintf("%d permits of %d held at once", held, c.h.Plan.Permits), holders...)
		}
	}
}

// checkFences: no two leases of one name have the same fencing number,
// and a lease asked for after another was granted has a larger one,
// across restarts, FLUSHALL and failovers (a killed master's replica is
// promoted seconds after its last number), but a split brain.
func (c *checker) checkFences() {
	for name, ops := range c.names {
		holder := map[int64]*Op{}
		for _, a := range ops {
			f, ok := a.Fences[name]
			if !ok {
				continue
			}
			if b := holder[f]; b != nil {
				if c.fault(fenceLoss, min(a.Start, b.Start), max(a.Enter, b.Enter)) != nil {
					c.excused["fence"]++
				} else {
					c.violate("fence", fmt.Sprintf("two leases of %s with fence %d", name, f), b, a)
				}
			}
			holder[f] = a
		}
		entered := byEnter(ops)
		var top *Op // the largest fence granted before the current op asked
		j := 0
		for _, b := range ops { // by Start
			for ; j < len(entered) && entered[j].Enter+int64(Slack) < b.Start; j++ {
				if a := entered[j]; top == nil || a.Fences[name] > top.Fences[name] {
					top = a
				}
			}
			if top != nil {
				c.checked["fence"]++
			}
			if top != nil && b.Fences[name] <= top.Fences[name] && c.fault(fenceLoss, top.Start, b.Enter) != nil {
				c.excused["fence"]++
				continue
			}
			if top != nil && b.Fences[name] <= top.Fences[name] {
				c.violate("fence", fmt.Sprintf("fence %d of %s not above %d, granted before it was asked for",
					b.Fences[name], name, top.Fences[name]), top, b)
			}
		}
	}
}

// checkLeaks: a worker process has no goroutine left over once it closed
// its Caches and its client.
func (c *checker) checkLeaks() {
	for proc, leak := range c.h.Leaks {
		c.checked["leak"]++
		if leak != "" {
			c.violate("leak", fmt.Sprintf("process %d: %s", proc, leak))
		}
	}
}
