package redistest

import (
	"slices"
	"testing"
)

type runFunc func() int

func (f runFunc) Run() int { return f() }

// TestSpareClusters: with spare clusters on, a cluster leaves a spare of
// its shape, joined but not one of its nodes, which the next cluster of
// that shape is; it works like a fresh one (it holds nothing but what the
// test writes), and the spares left are killed once the tests have run.
// Not parallel: spares are the binary's, and the other tests run without.
func TestSpareClusters(t *testing.T) {
	t.Cleanup(spare.stop) // if a Fatal ends the test before Run returns
	var left *Cluster
	code := WithSpareClusters(runFunc(func() int {
		first := StartCluster(t, 3)
		idle := spare.idle[shape{3, 0}]
		if idle == nil {
			t.Fatal("no idle spare after a 3-master cluster")
		}
		if slices.ContainsFunc(idle.all, func(s *Server) bool { return slices.Contains(first.all, s) }) {
			t.Errorf("spare %v shares nodes with the cluster %v", idle.Addrs(), first.Addrs())
		}
		second := StartCluster(t, 3)
		if second != idle {
			t.Errorf("second cluster %v; want the spare %v", second.Addrs(), idle.Addrs())
		}
		rdb := second.Client(t)
		if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
			t.Fatalf("SET on a spare cluster: %v", err)
		}
		size, err := rdb.DBSize(t.Context()).Result()
		if err != nil || size != 1 {
			t.Errorf("DBSIZE = %d, %v; want 1 (the spare held nothing)", size, err)
		}
		if left = spare.idle[shape{3, 0}]; left == nil || left == second {
			t.Fatal("no new spare after the second cluster")
		}
		return 7
	})).Run()
	if code != 7 {
		t.Errorf("Run = %d; want m.Run's 7", code)
	}
	for _, s := range left.all {
		if s.Running() {
			t.Errorf("spare node %s runs after the tests; want it killed", s.Addr())
		}
	}
	if spare.on || len(spare.idle) != 0 {
		t.Errorf("after the tests: spares on %v, %d idle; want off, none", spare.on, len(spare.idle))
	}
}
