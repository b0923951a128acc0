package torture

// runner_nemesis_cluster_test.go holds the nemesis's faults and
// bookkeeping of a cluster: killed masters, and the failovers the cluster
// makes on its own.

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// killMaster kills a random shard's master, waits for its replica's
// promotion, and returns the heal that restarts it as a replica.
func (n *nemesis) killMaster(f *Fault) func() {
	i := n.r.IntN(len(n.shards))
	old, replica := n.shards[i][0], n.shards[i][1]
	f.Target = old.Addr()
	old.Kill()
	return func() {
		n.cl.AwaitPromotion(n.t, replica)
		old.Restart()
		n.shards[i] = [2]*redistest.Server{replica, old}
		n.awaitSync(old)
	}
}

// awaitSync waits until replica s has caught up with its master, so that
// a later fault of its shard can promote it.
func (n *nemesis) awaitSync(s *redistest.Server) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	redistest.Eventually(n.t, "a restarted master to sync as a replica", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up\r\n")
	})
}

// followFailovers finds the shards whose master the cluster failed over
// on its own (one stopped briefly, judged failed on a loaded machine, and
// back as a master until it learned), records each as a split brain since
// the time given, and follows the promotion, so that later faults know
// each shard's master.
func (n *nemesis) followFailovers(since int64) {
	for i, sh := range n.shards {
		if !n.failed(sh[0]) {
			continue
		}
		f := Fault{Kind: FSplitBrain, Target: sh[0].Addr(), Start: since}
		n.cl.AwaitPromotion(n.t, sh[1])
		n.shards[i] = [2]*redistest.Server{sh[1], sh[0]}
		n.awaitSync(sh[0])
		f.End = now()
		n.faults = append(n.faults, f)
		n.unplanned++
	}
}

// failed reports whether master s is no longer one, or some node has
// agreed that it failed (its replica's election follows).
func (n *nemesis) failed(s *redistest.Server) bool {
	failed := false
	n.admin(s.Addr(), func(c *redis.Client, ctx context.Context) error {
		info, err := c.Info(ctx, "replication").Result()
		failed = err == nil && !strings.Contains(info, "role:master\r\n")
		return err
	})
	id := ""
	n.admin(s.Addr(), func(c *redis.Client, ctx context.Context) error {
		var err error
		id, err = c.ClusterMyID(ctx).Result()
		return err
	})
	for _, sh := range n.shards {
		for _, node := range sh {
			n.admin(node.Addr(), func(c *redis.Client, ctx context.Context) error {
				nodes, err := c.ClusterNodes(ctx).Result()
				for line := range strings.SplitSeq(nodes, "\n") {
					if f := strings.Fields(line); len(f) > 2 && f[0] == id && slices.Contains(strings.Split(f[2], ","), "fail") {
						failed = true
					}
				}
				return err
			})
		}
	}
	return failed
}

// anyNode returns a random node of the cluster, master or replica.
func (n *nemesis) anyNode() *redistest.Server {
	sh := n.shards[n.r.IntN(len(n.shards))]
	return sh[n.r.IntN(2)]
}
