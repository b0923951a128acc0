package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// settle waits until every running node agrees on want, which becomes
// the cluster's layout. retry, if not nil, is called every failoverRetry
// meanwhile (Redis gives up a manual failover that did not complete in
// time, and it must be asked again).
func (c *Cluster) settle(ctx context.Context, want layout, retry func() error) error {
	clients := c.clients()
	defer closeAll(clients)
	last := time.Now()
	err := poll(ctx, clusterStep, func() error {
		if retry != nil && time.Since(last) > failoverRetry {
			last = time.Now()
			if err := retry(); err != nil {
				return err
			}
		}
		return c.agreed(ctx, clients, want)
	})
	if err == nil {
		c.mu.Lock()
		c.lay = want
		c.mu.Unlock()
	}
	return err
}

// agreed reports whether every running node says the cluster is ok, knows
// every other running node as connected and in the role want gives it,
// maps every slot to the owner in want and, as a replica, is in sync.
func (c *Cluster) agreed(ctx context.Context, clients []*redis.Client, want layout) error {
	for i, rdb := range clients {
		if !c.all[i].Running() {
			continue
		}
		addr := rdb.Options().Addr
		if want.master[c.ids[i]] != "-" {
			info, err := rdb.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: INFO replication: %w", addr, err)
			}
			if !strings.Contains(info, "master_link_status:up\r\n") {
				return fmt.Errorf("%s: replica not in sync", addr)
			}
		}
		info, err := rdb.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
		}
		if !strings.Contains(info, "cluster_state:ok\r\n") {
			return fmt.Errorf("%s: cluster_state is not ok", addr)
		}
		if err := c.rolesAgreed(ctx, rdb, want); err != nil {
			return err
		}
		if err := slotsAgreed(ctx, rdb, want); err != nil {
			return err
		}
	}
	return nil
}

// rolesAgreed reports whether rdb's node knows every node, and every
// running one as connected, in its role in want.
func (c *Cluster) rolesAgreed(ctx context.Context, rdb *redis.Client, want layout) error {
	addr := rdb.Options().Addr
	nodes, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return fmt.Errorf("%s: CLUSTER NODES: %w", addr, err)
	}
	lines := strings.Split(strings.TrimSpace(nodes), "\n")
	if len(lines) != len(c.all) {
		return fmt.Errorf("%s: knows %d nodes, want %d", addr, len(lines), len(c.all))
	}
	for _, line := range lines {
		// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link-state> <slot>...
		f := strings.Fields(line)
		if len(f) < 8 {
			return fmt.Errorf("%s: bad CLUSTER NODES line: %s", addr, line)
		}
		i := slices.Index(c.ids, f[0])
		if i < 0 {
			return fmt.Errorf("%s: knows a stranger: %s", addr, line)
		}
		if !c.all[i].Running() {
			continue // a killed node is failed, in whatever role
		}
		role := "master"
		if want.master[f[0]] != "-" {
			role = "slave"
		}
		if f[3] != want.master[f[0]] || f[7] != "connected" ||
			slices.ContainsFunc(strings.Split(f[2], ","), func(flag string) bool {
				return flag != "myself" && flag != role
			}) {
			return fmt.Errorf("%s: node not settled as a %s of %s: %s", addr, role, want.master[f[0]], line)
		}
	}
	return nil
}

// slotsAgreed reports whether rdb's node maps every slot to the owner in
// want (node ID and address).
func slotsAgreed(ctx context.Context, rdb *redis.Client, want layout) error {
	addr := rdb.Options().Addr
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
		if got[slot] != want.owner[slot] {
			return fmt.Errorf("%s: slot %d is owned by %q, want %q", addr, slot, got[slot], want.owner[slot])
		}
	}
	return nil
}
