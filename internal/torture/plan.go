package torture

// plan.go draws a run's configuration from its seed: the topology's
// shape, the Caches every worker process opens (and which of them have a
// near tier in which process), the locks, and the timings the checker
// relies on.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Topologies.
const (
	Server  = "server"  // one redis-server, some processes through a Proxy
	Cluster = "cluster" // 3 masters with a replica each
)

const (
	// cacheConfigs is how many Caches (each its own prefix) every process
	// opens: enough that one run mixes several option sets.
	cacheConfigs = 3
	// keysPerCache is the key space of each Cache: small, so that the
	// processes' calls collide on every key.
	keysPerCache = 5
	// lockTTL is every lease's TTL: long beside a hold (tens of ms), so
	// that leases are lost only to faults, short beside a run.
	lockTTL = time.Second
	// semPermits is the semaphore's size.
	semPermits = 3
)

// A Plan is a run's configuration, drawn from its seed.
type Plan struct {
	Seed     uint64
	Topology string
	Procs    int // worker processes, numbered from 1
	Workers  int // cache goroutines per process
	Lockers  int // lock goroutines per process
	Keys     int // keys per Cache: "k0".."k<Keys-1>"
	Caches   []CacheConfig
	Mutexes  []string // mutex names, shared by Mutex, WithFair and MultiMutex
	Sem      string   // the semaphore's name
	Permits  int64
	RW       string // the RWMutex's name
	LockTTL  time.Duration
	Proxied  []int // processes that reach the server through the Proxy, and their replacements (Server only)
	// Batched are the processes (and their replacements) whose GETs and
	// lock scripts share pipelines from the second call in progress on
	// (roundtrip.DirectEnv 1): with a few goroutines per process, the
	// default would send every call alone.
	Batched []int
}

// A CacheConfig is one Cache, opened by every process with these options
// (near tier aside: see NearProcs).
type CacheConfig struct {
	Prefix    string
	TTL       time.Duration // every Fetch, Refresh and Set's TTL
	Stale     time.Duration // WithStale; 0 for none
	Early     float64       // WithEarlyRefresh's beta; 0 for none
	Neg       time.Duration // WithNegativeTTL; 0 for none
	NearProcs []int         // processes whose Cache has WithNearCache (and their replacements)
	// Soft is WithSoftTimeout's wait, 0 for none; StaleIfDown is
	// WithStaleIfDown. Both only with Stale (StaleIfDown with a near tier).
	Soft        time.Duration
	StaleIfDown bool
}

func (c CacheConfig) String() string {
	s := fmt.Sprintf("%s ttl=%v", c.Prefix, c.TTL)
	if c.Stale > 0 {
		s += fmt.Sprintf(" stale=%v", c.Stale)
	}
	if c.Early > 0 {
		s += fmt.Sprintf(" early=%g", c.Early)
	}
	if c.Neg > 0 {
		s += fmt.Sprintf(" neg=%v", c.Neg)
	}
	if c.Soft > 0 {
		s += fmt.Sprintf(" soft=%v", c.Soft)
	}
	if c.StaleIfDown {
		s += " staleifdown"
	}
	return s + fmt.Sprintf(" near=%v", c.NearProcs)
}

// near reports whether the Cache of c in process proc of plan p has a
// near tier.
func (p Plan) near(cfg, proc int) bool {
	return slices.Contains(p.Caches[cfg].NearProcs, p.slot(proc))
}

// slot returns the process that proc replaces (a killed worker's
// replacement takes the next number), or proc: its configuration.
func (p Plan) slot(proc int) int { return (proc-1)%p.Procs + 1 }

// NewPlan draws the plan of a run with seed on topology.
func NewPlan(seed uint64, topology string) Plan {
	r := rand.New(rand.NewPCG(seed, 0))
	p := Plan{
		Seed: seed, Topology: topology,
		Procs: 3, Workers: 4, Lockers: 3, Keys: keysPerCache,
		Mutexes: []string{"torture:m0", "torture:m1", "torture:m2"},
		Sem:     "torture:sem", Permits: semPermits,
		RW: "torture:rw", LockTTL: lockTTL,
	}
	for i := range cacheConfigs {
		c := CacheConfig{
			Prefix: fmt.Sprintf("t%d:", i),
			// A few hundred ms: many expiries per run.
			TTL: time.Duration(200+r.IntN(600)) * time.Millisecond,
		}
		if r.IntN(2) == 0 {
			c.Stale = time.Duration(200+r.IntN(400)) * time.Millisecond
		}
		if r.IntN(2) == 0 {
			c.Early = 0.5 + r.Float64()*1.5
		}
		if r.IntN(2) == 0 {
			c.Neg = time.Duration(100+r.IntN(300)) * time.Millisecond
		}
		for proc := 1; proc <= p.Procs; proc++ {
			if r.IntN(2) == 0 {
				c.NearProcs = append(c.NearProcs, proc)
			}
		}
		p.Caches = append(p.Caches, c)
	}
	p.drawPolicies(seed)
	if topology == Server {
		for proc := 1; proc <= p.Procs; proc++ {
			if r.IntN(2) == 0 {
				p.Proxied = append(p.Proxied, proc)
			}
		}
	}
	for proc := 1; proc <= p.Procs; proc++ {
		if r.IntN(2) == 0 {
			p.Batched = append(p.Batched, proc)
		}
	}
	return p
}

// String describes the plan in a few lines, for the log.
func (p Plan) String() string {
	s := fmt.Sprintf("seed %d, %s, %d processes × (%d cache + %d lock goroutines), %d keys per cache, lock TTL %v, proxied %v, batched %v",
		p.Seed, p.Topology, p.Procs, p.Workers, p.Lockers, p.Keys, p.LockTTL, p.Proxied, p.Batched)
	for i, c := range p.Caches {
		s += fmt.Sprintf("\n  cache c%d: %s", i, c)
	}
	return s
}

// drawPolicies draws the freshness policies of the Caches WithStale, from
// a source of their own, so that a seed draws the rest of its plan as it
// did before they existed. The soft timeout is below the longest compute,
// so that callers get fresh values in time and stale ones at the timeout.
func (p *Plan) drawPolicies(seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range p.Caches {
		c := &p.Caches[i]
		if c.Stale == 0 {
			continue
		}
		if r.IntN(2) == 0 {
			c.Soft = time.Duration(5+r.IntN(30)) * time.Millisecond
		}
		c.StaleIfDown = len(c.NearProcs) > 0 && r.IntN(2) == 0
		if c.StaleIfDown {
			// A kept copy is served up to its stale point: past the
			// second or so it takes a stopped server to open the circuit.
			c.Stale = time.Duration(1000+r.IntN(2000)) * time.Millisecond
		}
	}
}
