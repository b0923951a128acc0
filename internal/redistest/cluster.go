package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds how long the nodes may take to agree on the cluster.
const clusterTimeout = 30 * time.Second

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = 16384

// A Cluster is a real local Redis Cluster. Each node is a [Server], so a test
// can kill, pause or restart it; a restarted node keeps its identity and
// rejoins.
//
// A Cluster is safe for concurrent use; do not modify Nodes or Replicas. The
// zero value is not usable; create one with [StartCluster] or
// [StartClusterReplicas].
type Cluster struct {
	// Nodes are the masters the cluster starts with. Nodes[i] owns the i-th
	// of len(Nodes) equal, contiguous slot ranges, until a failover hands
	// them to one of its replicas (see [Cluster.Failover]).
	Nodes []*Server
	// Replicas[i] are the replicas Nodes[i] starts with; nil for a cluster
	// from StartCluster.
	Replicas [][]*Server

	all []*Server // Nodes, then each Replicas[i] in turn
	ids []string  // node IDs, in the order of all

	mu  sync.Mutex // guards lay
	lay layout     // what the nodes agree on once settled
}

// A layout is what every node of a settled cluster reports: each slot's
// owner and each node's role.
type layout struct {
	owner  []string          // by slot: the master's "ID addr"
	master map[string]string // by node ID: its master's ID, "-" for a master
}

// StartCluster starts masters cluster-enabled redis-servers, joins them with
// CLUSTER MEET, gives each an even, contiguous share of the 16384 slots, and
// waits until every node reports cluster_state:ok and the same slot owners.
// tb.Cleanup kills the nodes.
//
// StartCluster fails the test with the nodes' output if the cluster does not
// form within 30 s. It skips or fails like [StartServer] when REDIS_ADDR is set
// or redis-server is missing.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	return StartClusterReplicas(tb, masters, 0)
}

// StartClusterReplicas starts a cluster like [StartCluster] whose masters
// each have replicas replicas (CLUSTER REPLICATE), and waits until every
// replica is in sync with its master and every node agrees on the roles.
// With replicas, the nodes' cluster-node-timeout is 1 s, so that the
// replica of a killed master is promoted in about 2 s (see
// [Cluster.AwaitPromotion]).
func StartClusterReplicas(tb testing.TB, masters, replicas int) *Cluster {
	tb.Helper()
	if masters < 1 || masters > slotCount || replicas < 0 {
		tb.Fatalf("redistest: StartClusterReplicas(%d, %d): need 1 to %d masters and no negative replicas",
			masters, replicas, slotCount)
	}
	RequireServer(tb)
	c := spare.take(masters, replicas)
	if c == nil {
		var err error
		if c, err = newCluster(masters, replicas); err != nil {
			tb.Fatal(err)
		}
	}
	for _, s := range c.all {
		s.adopt(tb)
	}
	// The next cluster's spare starts now, so that its wait runs while
	// this one settles and its test runs.
	spare.fill(masters, replicas)

	ctx, cancel := context.WithTimeout(tb.Context(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		tb.Fatalf("redistest: form a cluster of %d masters with %d replicas each: %v\n%s",
			masters, replicas, err, c.outputs())
	}
	return c
}

// newCluster starts the nodes of a cluster of masters with replicas each,
// which belong to no test yet, and joins them ([Cluster.join]). On an
// error it kills them.
func newCluster(masters, replicas int) (*Cluster, error) {
	var args []string
	if replicas > 0 {
		args = []string{
			"--cluster-node-timeout", strconv.Itoa(failoverNodeTimeout),
			// A replica's first full sync starts at once, not after 5 s.
			"--repl-diskless-sync-delay", "0",
		}
	}
	c := &Cluster{}
	for range masters * (1 + replicas) {
		s, err := makeServer(true, args)
		if err != nil {
			discardAll(c.all)
			return nil, err
		}
		c.all = append(c.all, s)
	}
	c.Nodes = c.all[:masters:masters]
	if replicas > 0 {
		c.Replicas = make([][]*Server, masters)
		for i := range c.Replicas {
			lo := masters + i*replicas
			c.Replicas[i] = c.all[lo : lo+replicas : lo+replicas]
		}
	}
	err := startAll(c.all)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		defer cancel()
		if err = c.join(ctx); err != nil {
			err = fmt.Errorf("redistest: join a cluster of %d masters with %d replicas each: %w\n%s",
				masters, replicas, err, c.outputs())
		}
	}
	if err != nil {
		discardAll(c.all)
		return nil, err
	}
	return c, nil
}

// Addrs returns the masters' addresses at the start, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new cluster client seeded with every node's address;
// tb.Cleanup closes it.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	addrs := make([]string, len(c.all))
	for i, s := range c.all {
		addrs[i] = s.Addr()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// join has the nodes meet and gives each master its share of the slots,
// without waiting for them to agree. A master that owns no slots counts
// itself in a minority, and reports cluster_state:ok only a
// cluster-node-timeout (2 s) after it last did, however soon the nodes
// agree: the 2 s of a cluster run from its join (for a spare, while other
// tests run).
func (c *Cluster) join(ctx context.Context) error {
	clients := c.clients()
	defer closeAll(clients)
	c.ids = make([]string, len(c.all))
	for i, rdb := range clients {
		id, err := rdb.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", c.all[i].Addr(), err)
		}
		c.ids[i] = id
		// Distinct epochs up front, as redis-cli does, so that the nodes need
		// not resolve epoch collisions before they agree.
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", c.all[i].Addr(), err)
		}
	}
	for i, s := range c.all[1:] {
		// The bus port is not port+10000, so MEET names it (Redis 7).
		s.mu.Lock()
		port, bus := s.port, s.busPort
		s.mu.Unlock()
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, bus).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET %s: %w", c.all[0].Addr(), c.all[i+1].Addr(), err)
		}
	}
	n := len(c.Nodes)
	c.lay = layout{owner: make([]string, slotCount), master: make(map[string]string, len(c.all))}
	for i, rdb := range clients[:n] {
		lo, hi := i*slotCount/n, (i+1)*slotCount/n-1
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.Nodes[i].Addr(), lo, hi, err)
		}
		for slot := lo; slot <= hi; slot++ {
			c.lay.owner[slot] = c.ids[i] + " " + c.Nodes[i].Addr()
		}
		c.lay.master[c.ids[i]] = "-"
	}
	for i := range clients[n:] {
		c.lay.master[c.ids[n+i]] = c.ids[i/len(c.Replicas[0])]
	}
	return nil
}

// form makes each replica of the joined nodes replicate its master, and
// waits until every node agrees on the cluster.
func (c *Cluster) form(ctx context.Context) error {
	clients := c.clients()
	defer closeAll(clients)
	n := len(c.Nodes)
	for i, rdb := range clients[n:] {
		master := c.lay.master[c.ids[n+i]]
		// A replica must have heard of its master (from the MEETs' gossip).
		if err := poll(ctx, clusterStep, func() error { return rdb.Do(ctx, "CLUSTER", "REPLICATE", master).Err() }); err != nil {
			return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", c.all[n+i].Addr(), master, err)
		}
	}
	return c.settle(ctx, c.lay, nil)
}

// clients returns a client for each node, in the order of c.all.
func (c *Cluster) clients() []*redis.Client {
	clients := make([]*redis.Client, len(c.all))
	for i, s := range c.all {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
	}
	return clients
}

func closeAll(clients []*redis.Client) {
	for _, rdb := range clients {
		_ = rdb.Close()
	}
}

// poll calls try every step until it succeeds or ctx is done; it returns
// try's last error, with ctx's, if it never succeeded.
func poll(ctx context.Context, step time.Duration, try func() error) error {
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// outputs returns every node's output, for failure messages.
func (c *Cluster) outputs() string {
	var b strings.Builder
	for i, s := range c.all {
		s.mu.Lock()
		b.WriteString("--- node " + strconv.Itoa(i) + " (" + s.addr() + ") ---\n")
		b.WriteString(s.output())
		s.mu.Unlock()
	}
	return b.String()
}
