package torture

// history.go is the ledger: what the workers did and what the nemeses
// did, with wall-clock times, in a form the checker reads.

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// The kinds of operation a worker records.
const (
	KFetch     = "fetch"
	KFetchMany = "fetchmany"
	KRefresh   = "refresh"
	KGet       = "get"
	KSet       = "set"
	KDelete    = "delete"
	KExpire    = "expire"     // Expire of a key: with WithStale it voids the key, else it is a Delete
	KCompute   = "compute"    // a call of a compute function, by any of the above
	KInval     = "invalidate" // InvalidateTag of Tags
	KMutex     = "mutex"      // a plain Mutex's critical section
	KFair      = "fair"       // a Mutex WithFair
	KMulti     = "multi"      // a MultiMutex over Keys
	KSem       = "sem"        // a Semaphore's permits (Weight of Permits)
	KRLock     = "rlock"      // an RWMutex's reader
	KWLock     = "wlock"      // an RWMutex's writer
	// KStall: the worker's goroutines ran late, from Start to End (a
	// starved CPU): its 10 ms ticker was due at Start and ran at End, more
	// than StallMin late.
	KStall = "stall"
)

// StallMin is the shortest stall a worker records: a lease's Done may be
// observed as late as a stall, and the lock package's drift margin for a
// TTL of 1 s is 12 ms.
const StallMin = 10 * time.Millisecond

// stallGap is the longest a process may run between two stalls that the
// checker takes for one: a tick of its ticker.
const stallGap = 10 * time.Millisecond

// NotFound is the version a read records for a key answered "not found"
// (a tombstone or a compute that found nothing): a version that carries
// no order.
const NotFound = -1

// An Op is one operation of one worker goroutine, or one call of a compute
// function. A worker writes it in phases (begin; for a lock the moment it
// was acquired and the moment it left its section; end), each a line of the ledger holding the fields known
// by then; an Op whose process died mid-way has no End.
type Op struct {
	ID   int64    `json:"id"`
	Proc int      `json:"p,omitempty"` // the worker process, from 1
	G    int      `json:"g,omitempty"` // the goroutine in it
	Kind string   `json:"k,omitempty"`
	Cfg  int      `json:"c,omitempty"`    // the cache configuration (Plan.Caches)
	Keys []string `json:"keys,omitempty"` // cache keys, or lock names
	Via  int64    `json:"via,omitempty"`  // a compute: the ID of the call whose compute function it is
	ViaK string   `json:"viak,omitempty"` // and that call's kind

	Start int64 `json:"s,omitempty"` // unix ns: called (a compute: before drawing its version)
	Enter int64 `json:"n,omitempty"` // a lock: acquired
	Exit  int64 `json:"x,omitempty"` // a lock: work stopped (its hold ended, or Done closed)
	End   int64 `json:"e,omitempty"` // returned

	// Vers are the versions, by key: those a read returned (NotFound for
	// "not found"), the one a Set wrote, those a compute drew.
	Vers   map[string]int64 `json:"v,omitempty"`
	Fences map[string]int64 `json:"f,omitempty"` // a lock's fencing numbers, by name
	Weight int64            `json:"w,omitempty"` // a semaphore's permits
	// Tags are the tags a compute attached to its values with Tag, that a
	// SetTagged gave its value, or that an InvalidateTag invalidated;
	// Tagged is when the compute's Tag returned.
	Tags   []string `json:"tags,omitempty"`
	Tagged int64    `json:"tagged,omitempty"`
	Lost   bool     `json:"lost,omitempty"`
	Err    string   `json:"err,omitempty"`
	// Prev is the version dogpile.Previous gave a compute (0: none); Down
	// marks a Fetch answered with a copy kept WithStaleIfDown.
	Prev int64 `json:"prev,omitempty"`
	Down bool  `json:"down,omitempty"`
}

// open reports whether op never ended (its process died or was stopped).
func (op *Op) open() bool { return op.End == 0 }

// ok reports whether op returned without an error.
func (op *Op) ok() bool { return !op.open() && op.Err == "" }

// isLock reports whether op is a lock's critical section.
func (op *Op) isLock() bool {
	switch op.Kind {
	case KMutex, KFair, KMulti, KSem, KRLock, KWLock:
		return true
	}
	return false
}

func (op *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d p%d/g%d %s", op.ID&0xffffffff, op.Proc, op.G, op.Kind)
	if op.Kind != KCompute || op.Cfg != 0 {
		if !op.isLock() {
			fmt.Fprintf(&b, " c%d", op.Cfg)
		}
	}
	if len(op.Keys) > 0 {
		fmt.Fprintf(&b, " %v", op.Keys)
	}
	if len(op.Tags) > 0 {
		fmt.Fprintf(&b, " tags %v", op.Tags)
	}
	if op.Via != 0 {
		fmt.Fprintf(&b, " via #%d(%s)", op.Via&0xffffffff, op.ViaK)
	}
	fmt.Fprintf(&b, " [%s", stamp(op.Start))
	if op.Tagged != 0 {
		fmt.Fprintf(&b, " tagged %s", stamp(op.Tagged))
	}
	if op.Enter != 0 {
		fmt.Fprintf(&b, " enter %s exit %s", stamp(op.Enter), stamp(op.Exit))
	}
	fmt.Fprintf(&b, " .. %s]", stamp(op.End))
	if len(op.Vers) > 0 {
		fmt.Fprintf(&b, " v=%v", op.Vers)
	}
	if len(op.Fences) > 0 {
		fmt.Fprintf(&b, " fences=%v", op.Fences)
	}
	if op.Weight != 0 {
		fmt.Fprintf(&b, " w=%d", op.Weight)
	}
	if op.Lost {
		b.WriteString(" lost")
	}
	if op.Err != "" {
		fmt.Fprintf(&b, " err=%q", op.Err)
	}
	return b.String()
}

// stamp formats a unix-ns time as seconds and microseconds of the minute,
// enough to order the lines of one excerpt; "-" for none.
func stamp(ns int64) string {
	if ns == 0 {
		return "-"
	}
	t := time.Unix(0, ns)
	return fmt.Sprintf("%02d.%06d", t.Second(), t.Nanosecond()/1e3)
}

// Fault kinds, what the nemeses did (see runner_nemesis_test.go).
const (
	FPause      = "pause"       // a server stopped (SIGSTOP) until End
	FRestart    = "restart"     // a server killed and started again, empty
	FFlushAll   = "flushall"    // FLUSHALL on every master
	FScript     = "scriptflush" // SCRIPT FLUSH on every node
	FKillNormal = "clientkill"  // CLIENT KILL TYPE normal
	FKillPubSub = "pubsubkill"  // CLIENT KILL TYPE pubsub (wake-ups, near-tier tracking)
	FDrop       = "drop"        // replies lost by the proxy
	FDelay      = "delay"       // replies held back by the proxy (N ms)
	FFailover   = "failover"    // a graceful CLUSTER FAILOVER: nothing lost
	FKillMaster = "killmaster"  // a master killed, its replica promoted, the old one back as a replica
	// FSplitBrain: a master stopped briefly and failed over by the cluster
	// on its own; back, it took writes as a master until it learned.
	FSplitBrain = "splitbrain"
	FPauseProc  = "pauseproc" // a worker process stopped (SIGSTOP) past its leases
	FKillProc   = "killproc"  // a worker process killed (SIGKILL), and another started (N)
)

// A Fault is one nemesis action, from its start until it was healed.
type Fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target,omitempty"` // a server's address, or "all"
	Proc   int    `json:"proc,omitempty"`   // FPauseProc's process
	N      int64  `json:"n,omitempty"`      // FDrop: replies to drop; FDelay: ms each reply is late
	Start  int64  `json:"s"`
	End    int64  `json:"e"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("fault %s", f.Kind)
	if f.Target != "" {
		s += " " + f.Target
	}
	if f.Proc != 0 {
		s += fmt.Sprintf(" p%d", f.Proc)
	}
	if f.N != 0 {
		s += fmt.Sprintf(" n=%d", f.N)
	}
	return s + fmt.Sprintf(" [%s .. %s]", stamp(f.Start), stamp(f.End))
}

// overlaps reports whether f was in effect at some time in [from, to].
func (f Fault) overlaps(from, to int64) bool { return f.Start <= to && f.End >= from }

// A History is everything one run recorded, for Check.
type History struct {
	Plan   Plan
	Ops    []*Op // by Start
	Faults []Fault
	// Died is when each process that did not exit normally died (killed,
	// or still stopped at the end): its open ops end there.
	Died map[int]int64
	// Leaks are the goroutines each process had left over after closing
	// its Caches and client (empty: none).
	Leaks map[int]string
}

// Save writes h to path as JSON, for LoadHistory.
func (h *History) Save(path string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadHistory reads a history that Save wrote, to check it again.
func LoadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h := &History{}
	return h, json.Unmarshal(b, h)
}

func sortOps(ops []*Op) {
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].Start != ops[j].Start {
			return ops[i].Start < ops[j].Start
		}
		return ops[i].ID < ops[j].ID
	})
}
