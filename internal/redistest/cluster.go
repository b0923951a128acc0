package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds how long the nodes may take to agree on the cluster.
const clusterTimeout = 30 * time.Second

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = 16384

// A Cluster is a real local Redis Cluster of master nodes without replicas.
// Each node is a [Server], so a test can kill, pause or restart it; a restarted
// node keeps its identity and rejoins.
//
// A Cluster is safe for concurrent use; do not modify Nodes. The zero value is
// not usable; create one with [StartCluster].
type Cluster struct {
	// Nodes are the masters. Nodes[i] owns the i-th of len(Nodes) equal,
	// contiguous slot ranges.
	Nodes []*Server
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
	if masters < 1 || masters > slotCount {
		tb.Fatalf("redistest: StartCluster(%d): need 1 to %d masters", masters, slotCount)
	}
	c := &Cluster{Nodes: make([]*Server, masters)}
	for i := range c.Nodes {
		c.Nodes[i] = newServer(tb, true, nil)
	}
	if err := startAll(c.Nodes); err != nil {
		tb.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(tb.Context(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		tb.Fatalf("redistest: form a %d-node cluster: %v\n%s", masters, err, c.outputs())
	}
	return c
}

// Addrs returns the nodes' addresses, in the order of Nodes.
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
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// form joins the running nodes into one cluster and waits until they agree on it.
func (c *Cluster) form(ctx context.Context) error {
	n := len(c.Nodes)
	clients := make([]*redis.Client, n)
	for i, s := range c.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer clients[i].Close()
	}

	ids := make([]string, n)
	for i, rdb := range clients {
		id, err := rdb.ClusterMyID(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", c.Nodes[i].Addr(), err)
		}
		ids[i] = id
		// Distinct epochs up front, as redis-cli does, so that the nodes need
		// not resolve epoch collisions before they agree.
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", c.Nodes[i].Addr(), err)
		}
	}
	for i, s := range c.Nodes[1:] {
		// The bus port is not port+10000, so MEET names it (Redis 7).
		s.mu.Lock()
		port, bus := s.port, s.busPort
		s.mu.Unlock()
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, bus).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER MEET %s: %w", c.Nodes[0].Addr(), c.Nodes[i+1].Addr(), err)
		}
	}
	owner := make([]string, slotCount) // node ID by slot
	for i, rdb := range clients {
		lo, hi := i*slotCount/n, (i+1)*slotCount/n-1
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE %d %d: %w", c.Nodes[i].Addr(), lo, hi, err)
		}
		for slot := lo; slot <= hi; slot++ {
			owner[slot] = ids[i] + " " + c.Nodes[i].Addr()
		}
	}

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := agreed(ctx, clients, owner)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes did not agree: %w (%v)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// agreed reports whether every node says the cluster is ok, knows every other
// node as a connected master, and maps every slot to the owner in want
// (node ID and address).
func agreed(ctx context.Context, clients []*redis.Client, want []string) error {
	for _, rdb := range clients {
		addr := rdb.Options().Addr
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok\r\n") {
			return fmt.Errorf("%s: cluster_state is not ok", addr)
		}

		nodes, err := rdb.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
		}
		lines := strings.Split(strings.TrimSpace(nodes), "\n")
		if len(lines) != len(clients) {
			return fmt.Errorf("%s: knows %d nodes, want %d", addr, len(lines), len(clients))
		}
		for _, line := range lines {
			// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link-state> <slot>...
			f := strings.Fields(line)
			if len(f) < 8 || f[7] != "connected" ||
				slices.ContainsFunc(strings.Split(f[2], ","), func(flag string) bool {
					return flag != "myself" && flag != "master"
				}) {
				return fmt.Errorf("%s: node not settled: %s", addr, line)
			}
		}

		slots, err := rdb.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SLOTS: %w", addr, err)
		}
		got := make([]string, slotCount)
		for _, r := range slots {
			if len(r.Nodes) == 0 || r.Start < 0 || r.End >= slotCount || r.Start > r.End {
				return fmt.Errorf("%s: bad CLUSTER SLOTS entry %+v", addr, r)
			}
			for slot := r.Start; slot <= r.End; slot++ {
				got[slot] = r.Nodes[0].ID + " " + r.Nodes[0].Addr
			}
		}
		for slot := range got {
			if got[slot] != want[slot] {
				return fmt.Errorf("%s: slot %d is owned by %q, want %q", addr, slot, got[slot], want[slot])
			}
		}
	}
	return nil
}

// outputs returns every node's output, for failure messages.
func (c *Cluster) outputs() string {
	var b strings.Builder
	for i, s := range c.Nodes {
		s.mu.Lock()
		b.WriteString("--- node " + strconv.Itoa(i) + " (" + s.addr() + ") ---\n")
		b.WriteString(s.output())
		s.mu.Unlock()
	}
	return b.String()
}
