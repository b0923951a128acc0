package near

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// InvalidateChannel is where Redis sends invalidation messages to a RESP2
// connection that tracking redirects to.
const InvalidateChannel = "__redis__:invalidate"

// Timings of a Tracker; variables so that tests may shorten them.
var (
	// Ping is how long the invalidation connection may stay silent
	// before it is pinged; a ping unanswered for as long again counts as a
	// dropped connection.
	Ping = time.Second
	// Idle is how long a Cache goes without a Fetch before its tracker
	// closes its connections (and empties the near tier).
	Idle = time.Minute
	// Backoff bounds the pause between attempts to restore tracking.
	Backoff = time.Second
	// Beat is how often a session's subscriber is pinged while it is up,
	// and at once on demand (see PingNow).
	// Redis answers a connection in order, so a ping's answer proves that
	// every invalidation Redis sent it before the ping has arrived.
	Beat = 20 * time.Millisecond
	// MaxLag is how long before a near hit the latest such proof may be
	// dated: while a connection's answers come later than that (a slow or
	// congested network, a stopped server), the tier is bypassed, and a
	// write that returned more than MaxLag ago is never answered from it
	// with the value it replaced.
	MaxLag = 100 * time.Millisecond
)

// A Tracker keeps the near tier of one Cache coherent: it holds, per Redis
// master, a session: one connection subscribed to the invalidations
// (SUBSCRIBE __redis__:invalidate, in RESP2) and readers, the connections
// whose reads may enter the tier (CLIENT TRACKING ON REDIRECT <the
// subscriber's id>, default mode; see reader.go).
//
// In the default mode Redis reports a write only to the connections that
// read the key, and only once per read: the cost of a write grows with the
// processes that hold the key, not with the fleet. Broadcast mode (BCAST
// PREFIX, one tracking subscriber covering the reads of the whole pool)
// sends every write under the prefix to every process; it is kept for the
// benchmark that compares the two (see Broadcast).
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
	prefix string
	x      *Index
	off    func(reason string) // the near tier cannot work with this client

	lastUse atomic.Int64 // Now() of a recent Fetch
	running atomic.Bool
	mu      sync.Mutex // guards running's changes, dead and ups
	dead    bool       // off for good
	ups     int        // sessions whose tracking is in place
	masters atomic.Pointer[map[string]bool]
	// heard holds, per tracked node, the Now() at which the latest ping
	// whose answer arrived was sent (see Beat), nil while not tracking.
	heard atomic.Pointer[[]atomic.Int64]
	wg    sync.WaitGroup // run
	// readers holds, per node address, the readers of its session up.
	rmu     sync.RWMutex
	readers map[string]*readers
	// asked is announced by PingNow: every beat pings at once. answered
	// is announced when a beat's ping is answered, and when tracking goes
	// up or down (see Answered).
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
}

func NewTracker(c redis.UniversalClient, prefix string, x *Index, off func(string)) *Tracker {
	return &Tracker{client: c, prefix: prefix, x: x, off: off, quit: make(chan struct{})}
}

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
	if now-t.lastUse.Load() > int64(Idle/8) {
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
		return clusterMasters(c)
	default:
		return nil, "a client of a kind the near cache does not follow (a Ring, or another type)"
	}
}

func clusterMasters(c *redis.ClusterClient) ([]*redis.Options, string) {
	var mu sync.Mutex
	var nodes []*redis.Options
	ctx, cancel := context.WithTimeout(context.Background(), Ping)
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
	var refused atomic.Pointer[error]
	var wg sync.WaitGroup
	for i, o := range nodes {
		wg.Go(func() { t.keep(ctx, o, len(nodes), &refused, &heard[i]) })
	}
	defer func() {
		cancel()
		wg.Wait()
		t.masters.Store(nil)
		t.heard.Store(nil)
	}()
	tick := time.NewTicker(Ping)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-t.quit:
			return true
		}
		if err := refused.Load(); err != nil {
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
	return Now()-t.lastUse.Load() >= int64(Idle)
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
	nodes, _ := clusterMasters(c)
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

// up counts a session's tracking in place (or lost); the tier is served
// only while all of them are.
func (t *Tracker) up(on bool, of int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if on {
		t.ups++
	} else {
		t.ups--
	}
	t.x.SetUp(t.ups == of)
	t.answered.announce()
}

// Idle makes t find the Cache idle at its next check, as if no Fetch had
// come for Idle: its sessions end and the tier is bypassed until the next
// Use.
func (t *Tracker) Idle() { t.lastUse.Store(math.MinInt64 / 2) }

// Wait waits until t's run, if any, has ended.
func (t *Tracker) Wait() { t.wg.Wait() }

// PingNow has every tracking connection pinged now rather than at its next
// beat: the subscribers, and the readers, each after the command it may be
// running (sent, maybe, before the call), so that HeardAfter and
// ReadersAfter of a time before the call hold about a round trip later
// (see Cache.nearSync, and Answered). The pings leave from the beats'
// goroutines, on their own contexts: PingNow does not wait.
func (t *Tracker) PingNow() { t.asked.announce() }

// Answered returns a channel closed at the next answer to a beat's ping,
// which may make HeardAfter or ReadersAfter hold, or when tracking next
// goes up or down.
func (t *Tracker) Answered() <-chan struct{} { return t.answered.wait() }
