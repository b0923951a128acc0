package torture

// runner_nemesis_test.go injects the faults: random kinds, one or
// several at once, on the server or the cluster and on the worker
// processes, each recorded as a Fault from its start until it was healed.

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

const (
	// maxCalm is the longest quiet spell between two rounds of faults.
	maxCalm = 800 * time.Millisecond
	// combinePercent is how often a round combines faults of two or three
	// categories (server, connections, processes).
	combinePercent = 35
	// clusterMaxPause keeps a paused cluster node well short of its
	// cluster-node-timeout (1 s), past which it would be failed over; on
	// a loaded machine the other nodes' pings come late, so a third of it.
	clusterMaxPause = 300 * time.Millisecond
	// pfailClear is how long after a cluster node resumed the other nodes
	// have had its answers to their pings, and have cleared their
	// suspicion of it, unless they had agreed it failed.
	pfailClear = 300 * time.Millisecond
	// adminTimeout bounds each command the nemesis sends.
	adminTimeout = 5 * time.Second
)

// A nemesis injects faults into one run's servers and processes. Its
// methods run on the test's goroutine (redistest's process control
// requires it).
type nemesis struct {
	t      testing.TB
	r      *rand.Rand
	plan   Plan
	srv    *redistest.Server        // Server topology
	proxy  *redistest.Proxy         // Server topology
	cl     *redistest.Cluster       // Cluster topology
	shards [][2]*redistest.Server   // Cluster: each shard's master and replica now
	kids   map[int]*redistest.Child // the live workers, by process
	spawn  func(proc int) *redistest.Child
	procs  int           // the processes started so far
	died   map[int]int64 // when each killed process died
	faults []Fault
	// unplanned counts the failovers the cluster made on its own.
	unplanned int
	round     int64 // when the last round of faults began
}

// A harm is a started fault: heal ends it.
type harm struct {
	f    *Fault
	hold time.Duration // how long it lasts before heal
	heal func()
}

// categories of fault kinds: one round takes at most one of each, and
// starts them in this order, so that no command is sent to a server that
// is down.
var categories = []string{"conn", "proc", "server"}

// procPercent is how often a round's first fault stops a worker: less
// than the others, as a stopped holder keeps every waiter of its locks
// waiting for a TTL.
const procPercent = 20

// category draws the category of a round's first fault.
func (n *nemesis) category() string {
	if n.r.IntN(100) < procPercent {
		return "proc"
	}
	return []string{"conn", "server"}[n.r.IntN(2)]
}

// kinds returns the fault kinds of category cat on the topology.
func (n *nemesis) kinds(cat string) []string {
	switch {
	case cat == "proc":
		return []string{FPauseProc, FPauseProc, FKillProc}
	case cat == "server" && n.cl == nil:
		return []string{FPause, FPause, FRestart}
	case cat == "server":
		return []string{FPause, FPause, FKillMaster, FFailover}
	case n.cl == nil:
		return []string{FFlushAll, FScript, FKillNormal, FKillPubSub, FDrop, FDrop, FDelay}
	}
	return []string{FFlushAll, FScript, FKillNormal, FKillPubSub}
}

// run injects rounds of faults until d has passed.
func (n *nemesis) run(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(n.r.Int64N(int64(maxCalm))))
		n.followFailovers(n.round)
		n.round = now()
		take := 1
		if n.r.IntN(100) < combinePercent {
			take = 2 + n.r.IntN(len(categories)-1)
		}
		cats := []string{n.category()}
		for _, i := range n.r.Perm(len(categories)) {
			if len(cats) < take && categories[i] != cats[0] {
				cats = append(cats, categories[i])
			}
		}
		slices.SortFunc(cats, func(a, b string) int { return slices.Index(categories, a) - slices.Index(categories, b) })
		var hs []harm
		var hold time.Duration
		for _, cat := range cats {
			ks := n.kinds(cat)
			h := n.start(ks[n.r.IntN(len(ks))])
			hs = append(hs, h)
			hold = max(hold, h.hold)
		}
		time.Sleep(hold)
		for i := len(hs) - 1; i >= 0; i-- {
			hs[i].heal()
			if hs[i].f.End == 0 { // a heal that goes on past the fault's end sets it
				hs[i].f.End = now()
			}
			n.faults = append(n.faults, *hs[i].f)
		}
	}
}

func now() int64 { return time.Now().UnixNano() }

// between returns a random duration in [lo, hi).
func (n *nemesis) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(n.r.Int64N(int64(hi-lo)))
}

// start starts a fault of kind.
func (n *nemesis) start(kind string) harm {
	f := &Fault{Kind: kind, Start: now()}
	h := harm{f: f, heal: func() {}}
	switch kind {
	case FPause:
		h.hold, h.heal = n.pause(f)
	case FRestart:
		f.Target = n.srv.Addr()
		n.srv.Kill()
		h.hold, h.heal = n.between(10*time.Millisecond, 500*time.Millisecond), n.srv.Restart
	case FKillMaster:
		h.heal = n.killMaster(f)
	case FFailover:
		i := n.r.IntN(len(n.shards))
		f.Target = n.shards[i][1].Addr()
		n.cl.Failover(n.t, n.shards[i][1])
		n.shards[i][0], n.shards[i][1] = n.shards[i][1], n.shards[i][0]
	case FFlushAll:
		f.Target = "all"
		n.everyMaster(func(c *redis.Client, ctx context.Context) error { return c.FlushAll(ctx).Err() })
	case FScript:
		f.Target = "all"
		n.everyMaster(func(c *redis.Client, ctx context.Context) error { return c.ScriptFlush(ctx).Err() })
	case FKillNormal, FKillPubSub:
		typ := map[string]string{FKillNormal: "normal", FKillPubSub: "pubsub"}[kind]
		s := n.srv
		if n.cl != nil {
			s = n.shards[n.r.IntN(len(n.shards))][0]
		}
		f.Target = s.Addr()
		n.admin(s.Addr(), func(c *redis.Client, ctx context.Context) error {
			return c.Do(ctx, "CLIENT", "KILL", "TYPE", typ).Err()
		})
	case FDrop:
		f.N = 1 + n.r.Int64N(5)
		n.proxy.DropReplies(f.N)
		h.hold, h.heal = n.between(10*time.Millisecond, 300*time.Millisecond), func() { n.proxy.DropReplies(0) }
	case FDelay:
		// Mostly short; up to past a lease: an extension answered too late.
		d := n.between(5*time.Millisecond, 100*time.Millisecond)
		if n.r.IntN(2) == 0 {
			d = n.between(100*time.Millisecond, lockTTL*5/4)
		}
		f.N = d.Milliseconds()
		n.proxy.DelayReplies(d)
		h.hold, h.heal = n.between(d, d+time.Second), func() { n.proxy.DelayReplies(0) }
	case FPauseProc:
		f.Proc = n.anyProc()
		k := n.kids[f.Proc]
		k.Pause(n.t)
		// Past every lease it holds, so that others take over.
		h.hold, h.heal = n.between(lockTTL*6/5, lockTTL*2), func() { k.Resume(n.t) }
	case FKillProc:
		f.Proc = n.anyProc()
		n.kids[f.Proc].Kill()
		n.died[f.Proc] = now()
		delete(n.kids, f.Proc)
		n.procs++
		f.N = int64(n.procs)
		n.kids[n.procs] = n.spawn(n.procs)
		n.kids[n.procs].Go(n.t)
	}
	return h
}

// pause stops the server, or a random node of the cluster, for a random
// hold: past the lock TTL at times on a server, well short of the
// cluster's node timeout on a cluster (where its heal follows a failover
// that the cluster started on its own all the same).
func (n *nemesis) pause(f *Fault) (time.Duration, func()) {
	if n.cl == nil {
		f.Target = n.srv.Addr()
		n.srv.Pause()
		return n.between(50*time.Millisecond, lockTTL*3/2), n.srv.Resume
	}
	s := n.anyNode()
	f.Target = s.Addr()
	s.Pause()
	return n.between(50*time.Millisecond, clusterMaxPause), func() {
		s.Resume()
		f.End = now()
		time.Sleep(pfailClear)
		n.followFailovers(f.Start)
	}
}

// anyProc returns a random live worker process.
func (n *nemesis) anyProc() int {
	procs := slices.Sorted(maps.Keys(n.kids))
	return procs[n.r.IntN(len(procs))]
}

// everyMaster runs cmd on the server, or on every master of the cluster.
func (n *nemesis) everyMaster(cmd func(*redis.Client, context.Context) error) {
	if n.cl == nil {
		n.admin(n.srv.Addr(), cmd)
		return
	}
	for _, sh := range n.shards {
		n.admin(sh[0].Addr(), cmd)
	}
}

// admin runs cmd on the server at addr, on a connection of its own; an
// error fails the test.
func (n *nemesis) admin(addr string, cmd func(*redis.Client, context.Context) error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := cmd(c, ctx); err != nil {
		n.t.Fatalf("torture: nemesis on %s: %v", addr, err)
	}
}
