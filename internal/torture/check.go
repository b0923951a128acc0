package torture

// check.go is the checker's frame: the index of a history that the rules
// (check_reads.go, check_tags.go, check_computes.go, check_locks.go) read,
// and the faults that excuse what they forbid.

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

const (
	// Slack is the margin of every comparison of two processes' clocks:
	// they read one machine's wall clock, and a time is taken a little
	// after (or before) the event it stands for.
	Slack = 2 * time.Millisecond
	// NearBound is how long after a write returned a process's near tier
	// may still answer with the value it replaced: the time for Redis's
	// invalidation to reach it (well under a millisecond on an idle
	// loopback), with room for a loaded machine.
	NearBound = 100 * time.Millisecond
	forever   = math.MaxInt64
)

// A Violation is a rule the history breaks, with the ops that break it.
type Violation struct {
	Rule  string
	Msg   string
	Ops   []*Op
	Known string // the known defect it is an instance of (see Known), or ""
}

// Fault sets: the faults that excuse a rule's exception.
var (
	// lockLoss: faults that can end a lease in Redis before its holder
	// knows (the server stops, loses its data, or fails over).
	lockLoss = []string{FPause, FRestart, FFlushAll, FFailover, FKillMaster, FSplitBrain}
	// dataLoss: faults that can remove a value or a lock from Redis.
	dataLoss = []string{FRestart, FFlushAll, FKillMaster, FSplitBrain}
	// rollback: faults after which Redis may hold a value older than one it
	// held before (a replica promoted before it had the last writes).
	rollback = []string{FKillMaster, FSplitBrain}
	// fenceLoss: faults after which a fencing number may be drawn again:
	// two masters drawing from copies of one counter at once, which the
	// lock package's clock rule does not cover (its failover must take a
	// second from the old master's last number to the new one's first).
	fenceLoss = []string{FSplitBrain}
	// demoting: faults during which a read may reach a master that was
	// replaced and has not learned it yet (see staleRead).
	demoting = []string{FFailover}
)

// staleRead reports whether read r, of a value last written at lw, may
// have been answered by a node holding older data than Redis had: after a
// failover that rolled writes back, or during a graceful one. A CLUSTER
// FAILOVER loses no write, but until the old master hears that its
// replica took over, it still answers reads, and a client whose slot map
// came from it (go-redis reloads the map from a random node) reads there.
func (c *checker) staleRead(r *Op, lw int64) bool {
	return c.fault(rollback, lw, r.End) != nil || c.fault(demoting, r.Start, r.End) != nil
}

// A checker indexes a history for the rules.
type checker struct {
	h      *History
	keys   map[ckey][]*Op   // cache ops by key (a FetchMany under each of its keys)
	names  map[string][]*Op // lock sections by name
	invals map[int][]*Op    // InvalidateTag calls by Cache
	expiry map[ckey][]*Op   // Expire calls of a Cache WithStale, by key (see voidedKey)
	died   map[int]int64    // History.Died, killed processes dated at their SIGKILL
	stall  map[int][]*Op    // KStall records, by process
	writes map[ckey]*writeIndex
	byID   map[int64]*Op
	births map[int64]*Op   // the op that drew each version: a compute or a Set
	obs    map[int64]int64 // the earliest end of an op that returned or wrote each version
	stored map[int64]int64 // the earliest end of an op that shows each version was in Redis
	out    []Violation

	checked, excused map[string]int // see Verdict
	lags             int
	maxLag           time.Duration
}

// A Verdict is what Check found.
type Verdict struct {
	Violations []Violation
	// Checked counts, by rule, what the rule judged (versions read,
	// reads, computes, sections, ordered pairs of leases, processes), and
	// Excused the exceptions that a fault, a stopped process or a shared
	// flight excused (what a Set, a Delete or a compute that found nothing
	// explains is no exception).
	Checked, Excused map[string]int
	// NearLags counts the reads from a near tier that returned a value
	// replaced by a Set or Delete that had returned (in another process)
	// within NearBound before they began; MaxNearLag is the longest such
	// lag.
	NearLags   int
	MaxNearLag time.Duration
}

// Check applies every rule to h.
func Check(h *History) Verdict {
	c := newChecker(h)
	c.checkPhantoms()
	c.checkReadAfterWrite()
	c.checkMonotonic()
	c.checkRefresh()
	c.checkInvalidate()
	c.checkComputeOverlap()
	c.checkComputeFresh()
	c.checkExclusion()
	c.checkSemaphore()
	c.checkFences()
	c.checkLeaks()
	c.checkPrevious()
	c.checkExpiry()
	c.checkStaleIfDown()
	for i := range c.out {
		c.out[i].Known = c.classify(c.out[i])
	}
	return Verdict{c.out, c.checked, c.excused, c.lags, c.maxLag}
}

func newChecker(h *History) *checker {
	c := &checker{h: h, keys: map[ckey][]*Op{}, names: map[string][]*Op{},
		invals: map[int][]*Op{}, expiry: map[ckey][]*Op{}, writes: map[ckey]*writeIndex{}, byID: map[int64]*Op{}, births: map[int64]*Op{}, obs: map[int64]int64{}, stored: map[int64]int64{},
		checked: map[string]int{}, excused: map[string]int{}}
	sortOps(h.Ops)
	c.died = killedAtSignal(h)
	c.stall = map[int][]*Op{}
	for _, op := range h.Ops {
		c.byID[op.ID] = op
		if op.Kind == KStall {
			c.stall[op.Proc] = append(c.stall[op.Proc], op)
			continue
		}
		if op.Kind == KExpire && h.Plan.Caches[op.Cfg].Stale == 0 {
			op.Kind = KDelete // Expire's contract: without WithStale it is Delete
		}
		if op.Kind == KExpire {
			ck := ckey{op.Cfg, op.Keys[0]}
			c.expiry[ck] = append(c.expiry[ck], op)
			continue
		}
		if op.Kind == KInval {
			c.invals[op.Cfg] = append(c.invals[op.Cfg], op)
			continue
		}
		if op.isLock() {
			if op.Enter != 0 {
				for _, n := range op.Keys {
					c.names[n] = append(c.names[n], op)
				}
			}
			continue
		}
		for _, k := range op.Keys {
			ck := ckey{op.Cfg, k}
			c.keys[ck] = append(c.keys[ck], op)
			if op.Kind == KSet || op.Kind == KDelete {
				if c.writes[ck] == nil {
					c.writes[ck] = &writeIndex{}
				}
				c.writes[ck].add(op)
			}
		}
		if op.Kind == KCompute || op.Kind == KSet {
			for _, v := range op.Vers {
				c.births[v] = op
			}
		}
		if op.open() {
			continue
		}
		for _, v := range op.Vers {
			// A compute's end, or a call that failed, does not show that
			// the value was in Redis: its store may be refused, or land
			// later.
			if v == NotFound || op.Err != "" || op.Kind == KCompute {
				continue
			}
			earliest(c.obs, v, op.End)
		}
	}
	// Only now are all births known.
	for _, op := range h.Ops {
		for _, v := range op.Vers {
			if op.ok() && c.proves(op, v) {
				earliest(c.stored, v, op.End)
			}
		}
	}
	return c
}

// killedAtSignal returns when each process that did not exit normally
// died, a killed one dated at its SIGKILL, not at when it was reaped, which
// may come seconds later on a loaded machine (seed 13326442740694002039:
// 2.1 s): it ran nothing after the signal, and its sections ended there.
func killedAtSignal(h *History) map[int]int64 {
	died := maps.Clone(h.Died)
	for _, f := range h.Faults {
		if d, ok := died[f.Proc]; ok && f.Kind == FKillProc && f.Start < d {
			died[f.Proc] = f.Start
		}
	}
	return died
}

// A ckey is a key of one Cache.
type ckey struct {
	cfg int
	key string
}

func (k ckey) String() string { return fmt.Sprintf("c%d/%s", k.cfg, k.key) }

// earliest lowers m[v] to t.
func earliest(m map[int64]int64, v, t int64) {
	if old, ok := m[v]; !ok || t < old {
		m[v] = t
	}
}

// proves reports whether op, which returned or wrote v, shows that v was
// in Redis by the time it returned. A compute's own process may be handed
// its value although its store was refused (it lost its compute lock), so
// only a Set, a Get, or a read in another process proves it.
func (c *checker) proves(op *Op, v int64) bool {
	if v == NotFound {
		return false
	}
	b := c.births[v]
	switch {
	case b == nil:
		return false
	case op.Kind == KSet || op.Kind == KGet:
		return true
	case op.Kind == KCompute:
		return false
	}
	return b.Kind == KCompute && b.Proc != op.Proc
}

func (c *checker) violate(rule, msg string, ops ...*Op) {
	c.out = append(c.out, Violation{Rule: rule, Msg: msg, Ops: ops})
}

// end is when op ended: when it returned, when its process died, or never.
func (c *checker) end(op *Op) int64 {
	if op.End != 0 {
		return op.End
	}
	if t, ok := c.died[op.Proc]; ok {
		return t
	}
	return forever
}

// exit is when a lock section stopped working.
func (c *checker) exit(op *Op) int64 {
	if op.Exit != 0 {
		return op.Exit
	}
	return c.end(op)
}

// fault returns a fault of one of kinds in effect at some time in
// [from, to], or nil.
func (c *checker) fault(kinds []string, from, to int64) *Fault {
	for i, f := range c.h.Faults {
		if slices.Contains(kinds, f.Kind) && f.overlaps(from, to) {
			return &c.h.Faults[i]
		}
	}
	return nil
}

// paused returns a stop of process proc in effect at some time in
// [from, to], or nil.
func (c *checker) paused(proc int, from, to int64) *Fault {
	for i, f := range c.h.Faults {
		if f.Kind == FPauseProc && f.Proc == proc && f.overlaps(from, to) {
			return &c.h.Faults[i]
		}
	}
	return nil
}

// stalled reports whether process proc's goroutines ran late (see
// KStall) all through [from, to]: stalls less than stallGap apart count as
// one (c.stall is by Start).
func (c *checker) stalled(proc int, from, to int64) bool {
	var start, reach int64
	for i, st := range c.stall[proc] {
		if i == 0 || st.Start > reach+int64(stallGap) {
			start = st.Start // a new run of stalls
		}
		reach = max(reach, st.End)
		if start <= from && reach >= to {
			return true
		}
	}
	return false
}

// stalls returns how long, in [from, to], the servers or process proc
// were stopped: the time an invalidation's delivery may take on top of
// NearBound.
func (c *checker) stalls(proc int, from, to int64) int64 {
	var d int64
	for _, f := range c.h.Faults {
		if (f.Kind == FPause || f.Kind == FPauseProc && f.Proc == proc) && f.overlaps(from, to) {
			d += min(f.End, to) - max(f.Start, from)
		}
	}
	return d
}

// lastWrite is the latest time version v may have been written to Redis,
// forever if unknown: a compute's value is stored at most once (its store
// is fenced by its lock), so before it is first seen; a Set may be sent
// again by go-redis until it returns, and one that failed may still land.
func (c *checker) lastWrite(v int64) int64 {
	t, ok := c.obs[v]
	if !ok {
		return forever
	}
	if b := c.births[v]; b != nil && b.Kind == KSet {
		if !b.ok() {
			return forever
		}
		return max(t, b.End)
	}
	return t
}
