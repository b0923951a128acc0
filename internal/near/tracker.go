package near

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// invalidateChannel is where Redis sends invalidation messages to a RESP2
// connection that tracking redirects to.
const invalidateChannel = "__redis__:invalidate"

// A Tracker keeps the near tier of one Cache coherent: it holds, per Redis
// master, a session: one connection subscribed to the invalidations
// (SUBSCRIBE __redis__:invalidate, in RESP2) and readers, the connections
// whose reads may enter the tier (CLIENT TRACKING ON REDIRECT <the
// subscriber's id>, default mode; see reader.go).
//
// In the default mode Redis reports a write only to the connections that
// read the key, and only once per read: the cost of a write grows with the
// processes that hold the key, not with the fleet. (Broadcast mode, BCAST
// PREFIX, which dogpile used before, sends every write under the prefix to
// every process: see bench/HISTORY, "Near tiers across a fleet".)
//
// Every loss is seen. The subscriber's death fails its read at once and
// the tier is flushed; a subscriber replaced by go-redis ends the session
// (its readers redirect to the old id, and what was sent meanwhile is
// lost). A reader's death (which makes Redis forget what it read) kills
// its Owner, whose values are no longer served; one that Redis closed
// without a word stops answering its pings, and its values are bypassed
// within MaxLag.
//
// NOLOOP is not used: it only hides a connection's own writes, and the
// tracking connections write nothing; this process's other connections
// (its Caches' Set, Delete and stores) must invalidate like anyone else's.
type Tracker struct {
	client redis.UniversalClient
	cfg    Config
	x      *Index
	off    func(reason string) // the near tier cannot work with this client

	lastUse atomic.Int64 // Now() of a recent Fetch
	running atomic.Bool
	mu      sync.Mutex // guards running's changes, dead and ups
	dead    bool       // off for good
	ups     int        // sessions whose tracking is in place
	masters atomic.Pointer[map[string]bool]
	// heard holds, per tracked node, the Now() at which the latest ping
	// whose answer arrived was sent (see Config.Beat), nil while not
	// tracking.
	heard atomic.Pointer[[]atomic.Int64]
	wg    sync.WaitGroup // run
	// readers holds, per node address, the readers of its session up.
	rmu     sync.RWMutex
	readers map[string]*readers
	// asked is announced by Sync: every beat pings at once. answered is
	// announced when a beat's ping is answered, and when tracking goes up
	// or down.
	asked, answered news
	quit            chan struct{} // closed by Stop

	// BeforeSession, if set, is called before each session on a node but
	// the first (tests hold tracking down with it); BeforeApply, before an
	// invalidation message is applied (tests hold invalidations back);
	// AfterIdle, when track has found the Cache idle, before its sessions
	// end (tests Fetch at that moment).
	BeforeSession, BeforeApply, AfterIdle func()
	// ReaderHook, if set, is added to the client of each session's
	// readers (tests hold their reads with it).
	ReaderHook redis.Hook
	// beforeBeat, if set, is called at the start of each beat's goroutine
	// (reader: a reader's, else the subscriber's), whose ctx ends with the
	// beat (tests start beats late with it).
	beforeBeat func(ctx context.Context, reader bool)
}

// NewTracker returns the Tracker of the tier x, whose reads go through c,
// configured by cfg (see Config for the defaults of the fields left
// zero). It tracks nothing until its first Use. If tracking proves
// impossible with c, it calls off once with the reason, and x stays down.
func NewTracker(c redis.UniversalClient, x *Index, off func(reason string), cfg Config) *Tracker {
	cfg.init()
	return &Tracker{client: c, cfg: cfg, x: x, off: off, quit: make(chan struct{})}
}

// Config returns t's configuration, its defaults filled in.
func (t *Tracker) Config() Config { return t.cfg }

// Stop ends tracking for good, at once, and waits until its goroutines
// have ended: the tier is bypassed from then on (Cache.Close).
func (t *Tracker) Stop() {
	t.mu.Lock()
	if !t.dead {
		t.dead = true
		close(t.quit)
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// Use records a Fetch at now and starts tracking if it is not running.
func (t *Tracker) Use(now int64) {
	if now-t.lastUse.Load() > int64(t.cfg.Idle/8) {
		t.lastUse.Store(now)
	}
	if t.running.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running.Load() || t.dead {
		return
	}
	t.lastUse.Store(now)
	t.running.Store(true)
	t.wg.Go(t.run)
}

// run tracks until the Cache goes idle or tracking proves impossible.
func (t *Tracker) run() {
	for {
		nodes, reason := t.nodes()
		if reason != "" {
			t.disable(reason)
			return
		}
		if t.track(nodes) && t.stopped() {
			return
		}
	}
}

// nodes lists the options of the servers to track on, or why none can be.
func (t *Tracker) nodes() ([]*redis.Options, string) {
	switch c := t.client.(type) {
	case *redis.Client:
		if c.Options().Addr == "FailoverClient" {
			return nil, "a failover client (its connections follow the master; the tracker's would not)"
		}
		return []*redis.Options{c.Options()}, ""
	case *redis.ClusterClient:
		o := c.Options()
		if o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
			return nil, "a cluster client that reads from replicas (they lag behind the invalidations)"
		}
		return clusterMasters(c, t.cfg.Ping)
	default:
		return nil, "a client of a kind the near cache does not follow (a Ring, or another type)"
	}
}

// clusterMasters lists the options of c's masters, asked for within
// timeout.
func clusterMasters(c *redis.ClusterClient, timeout time.Duration) ([]*redis.Options, string) {
	var mu sync.Mutex
	var nodes []*redis.Options
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := c.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, n.Options())
		return nil
	})
	if err != nil {
		return nil, "" // no topology yet: track nothing, and look again
	}
	return nodes, ""
}

// disable turns the near tier off for good, once.
func (t *Tracker) disable(reason string) {
	t.mu.Lock()
	t.dead = true
	t.running.Store(false)
	t.mu.Unlock()
	t.off(reason)
}

// track runs one session per node until the Cache goes idle (true), the
// set of masters changes, or a server refuses tracking (then t is dead).
func (t *Tracker) track(nodes []*redis.Options) (stop bool) {
	set := make(map[string]bool, len(nodes))
	for _, o := range nodes {
		set[o.Addr] = true
	}
	t.masters.Store(&set)
	heard := make([]atomic.Int64, len(nodes))
	t.heard.Store(&heard)
	ctx, cancel := context.WithCancel(context.Background())
	refused := newRefused()
	var wg sync.WaitGroup
	for i, o := range nodes {
		wg.Go(func() { t.keep(ctx, o, len(nodes), refused, &heard[i]) })
	}
	defer func() {
		cancel()
		wg.Wait()
		t.masters.Store(nil)
		t.heard.Store(nil)
	}()
	tick := time.NewTicker(t.cfg.Ping)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-refused.done: // off now, not at the next tick
		case <-t.quit:
			return true
		}
		if err := refused.err.Load(); err != nil {
			cancel()
			wg.Wait()
			t.disable("the server refuses CLIENT TRACKING or its invalidation channel: " + (*err).Error())
			return true
		}
		if t.idle() {
			if t.AfterIdle != nil {
				t.AfterIdle()
			}
			return true
		}
		if len(nodes) == 0 || t.moved(set) {
			return false
		}
	}
}

// idle reports whether the Cache has gone without a Fetch for Idle.
func (t *Tracker) idle() bool {
	return Now()-t.lastUse.Load() >= int64(t.cfg.Idle)
}

// stopped records, once track's sessions have ended, that tracking is off,
// unless t is dead (disable recorded it) or a Fetch came while the sessions
// ended: then run goes on. running is cleared only here, after the last
// session, so a Fetch that starts the next run never overlaps this one (two
// runs would count each other's sessions as up and clear each other's
// masters).
func (t *Tracker) stopped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead {
		return true
	}
	if !t.idle() {
		return false
	}
	t.running.Store(false)
	return true
}

// moved reports whether a Cluster's masters are no longer set. It asks
// the cluster afresh: ForEachMaster reloads the slots (CLUSTER SLOTS) at
// each call. That is how the tracker follows a failover: a process that
// serves only near hits meets no MOVED, so the client's cached slots
// would name a demoted master for ever (TestNearCacheClusterFailover).
// It also gives the client a promoted replica's address after a master
// died: go-redis reloads on MOVED or once a minute, not on a refused
// connection.
func (t *Tracker) moved(set map[string]bool) bool {
	c, ok := t.client.(*redis.ClusterClient)
	if !ok {
		return false
	}
	nodes, _ := clusterMasters(c, t.cfg.Ping)
	if len(nodes) != len(set) {
		return true
	}
	for _, o := range nodes {
		if !set[o.Addr] {
			return true
		}
	}
	return false
}

// setReaders records the readers of the node at addr (nil: none).
func (t *Tracker) setReaders(addr string, rd *readers) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	if rd == nil {
		delete(t.readers, addr)
		return
	}
	if t.readers == nil {
		t.readers = make(map[string]*readers)
	}
	t.readers[addr] = rd
}

// Node names the node whose readers read vk: "" if tracking does not
// cover vk now (no session is up on its node, or a Cluster's slots are
// unknown).
func (t *Tracker) Node(vk string) string {
	var addr string
	switch c := t.client.(type) {
	case *redis.Client:
		addr = c.Options().Addr
	case *redis.ClusterClient:
		n, err := c.MasterForKey(context.Background(), vk)
		if err != nil {
			return ""
		}
		addr = n.Options().Addr
	}
	t.rmu.RLock()
	defer t.rmu.RUnlock()
	if t.readers[addr] == nil {
		return ""
	}
	return addr
}

// Read runs f on a free reader of node (see Node): the values f reads
// may enter the tier, owned by o (nil if the connection failed). ok is
// false when no reader is free or node has none: the caller reads through
// its own client, and keeps nothing.
func (t *Tracker) Read(ctx context.Context, node string, f func(redis.Cmdable) error) (o *Owner, err error, ok bool) {
	if node == "" {
		return nil, nil, false
	}
	t.rmu.RLock()
	rd := t.readers[node]
	t.rmu.RUnlock()
	if rd == nil {
		return nil, nil, false
	}
	return rd.try(ctx, f)
}

// up counts a session's tracking in place (or lost, its connection
// failed: see Index.setUp); the tier is served only while all of them
// are.
func (t *Tracker) up(on, lost bool, of int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if on {
		t.ups++
	} else {
		t.ups--
	}
	t.x.setUp(t.ups == of, lost)
	t.answered.announce()
}

// Sync returns once the tier has applied every invalidation Redis sent
// before the call: every tracked node has answered a ping sent after it
// (see heardAfter), and every live reader too, so Redis still tracked what
// they read (see readersAfter). It has them pinged now, not at their next
// beats, so that takes about a round trip; the pings leave from the beats'
// goroutines, on their own contexts. If it takes longer than MaxLag, or
// ctx ends first, Sync empties the tier instead (see Index.DropAll). A
// tier that is down, or goes down meanwhile, serves nothing as fresh; the
// copies it kept (see Handlers.Keep) are dropped, for they would hear of
// nothing the call is waiting for.
func (t *Tracker) Sync(ctx context.Context) {
	since := Now()
	t.asked.announce()
	late := time.NewTimer(t.cfg.MaxLag)
	defer late.Stop()
	for {
		answered := t.answered.wait() // before the look: an answer just after it closes it
		if !t.x.Up() {
			if t.x.Kept() {
				t.x.DropAll()
			}
			return
		}
		if t.heardAfter(since) && t.readersAfter(since) {
			return
		}
		select {
		case <-answered:
		case <-late.C:
			t.x.DropAll()
			return
		case <-ctx.Done():
			t.x.DropAll()
			return
		}
	}
}
