package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// failoverNodeTimeout is the cluster-node-timeout, in milliseconds, of
	// a cluster with replicas: a master silent for as long is failed, and
	// its replica promoted about a second later. Short, for tests; long
	// enough that a loaded machine does not fail a master that is merely
	// slow.
	failoverNodeTimeout = 1000

	// failoverRetry is how long a CLUSTER FAILOVER may take before it is
	// asked again: Redis gives up a manual failover after 5 s.
	failoverRetry = 6 * time.Second
)

// Failover makes replica take over its master's slots with a graceful
// CLUSTER FAILOVER (the master stops taking writes until the replica has
// caught up, so no write is lost), and waits until every running node
// agrees: replica is the master of those slots, the old master and its
// other replicas replicate it, in sync, and the cluster is ok. Failover
// fails the test if that does not happen within 30 s. Call it from the
// goroutine running the test.
func (c *Cluster) Failover(tb testing.TB, replica *Server) {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(tb.Context(), clusterTimeout)
	defer cancel()
	want, err := c.promote(replica)
	if err != nil {
		tb.Fatal(err)
	}
	failover := func() error { return rdb.Do(ctx, "CLUSTER", "FAILOVER").Err() }
	if err := failover(); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replica.Addr(), err)
	}
	if err := c.settle(ctx, want, failover); err != nil {
		tb.Fatalf("redistest: failover to %s: %v\n%s", replica.Addr(), err, c.outputs())
	}
}

// AwaitPromotion waits until replica has taken over the slots of its
// master, which the test has killed (or paused): every running node
// agrees that replica is their master, that the master's other running
// replicas replicate it, in sync, and that the cluster is ok. With one
// replica per master, the promotion comes about 2 s after the master
// stopped (see [StartClusterReplicas]). AwaitPromotion fails the test if
// it does not happen within 30 s. Call it from the goroutine running the
// test.
func (c *Cluster) AwaitPromotion(tb testing.TB, replica *Server) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), clusterTimeout)
	defer cancel()
	want, err := c.promote(replica)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.settle(ctx, want, nil); err != nil {
		tb.Fatalf("redistest: promotion of %s: %v\n%s", replica.Addr(), err, c.outputs())
	}
}

// promote returns the layout after replica takes over its master's slots:
// the master, and its other replicas, replicate replica from then on.
func (c *Cluster) promote(replica *Server) (layout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.all, replica)
	if i < 0 || c.lay.master[c.ids[i]] == "-" {
		return layout{}, fmt.Errorf("redistest: %s is not a replica of this cluster", replica.Addr())
	}
	id := c.ids[i]
	old := c.lay.master[id]
	next := layout{owner: slices.Clone(c.lay.owner), master: make(map[string]string, len(c.lay.master))}
	for n, m := range c.lay.master {
		if n == old || m == old {
			m = id
		}
		next.master[n] = m
	}
	next.master[id] = "-"
	for slot, o := range next.owner {
		if strings.HasPrefix(o, old+" ") {
			next.owner[slot] = id + " " + replica.Addr()
		}
	}
	return next, nil
}

// CutReplication stops s's writes from reaching its replicas: their links
// are killed, and s's default user may no longer sync (a replica that
// reconnects cannot resynchronize), so s goes on alone as a master whose
// replicas lag behind: what a network partition or a failover that loses
// writes leaves.
func (s *Server) CutReplication(tb testing.TB) {
	tb.Helper()
	rdb := s.Client(tb)
	if err := rdb.Do(tb.Context(), "ACL", "SETUSER", "default", "-sync", "-psync").Err(); err != nil {
		tb.Fatal(err)
	}
	if err := rdb.Do(tb.Context(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		tb.Fatal(err)
	}
}
