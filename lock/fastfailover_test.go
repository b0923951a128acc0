package lock_test

import (
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestFenceAboveEveryIssuedAfterFastFailover (issue 43): a failover that
// loses a master's last fences and is over at once (a replica promoted
// with REPLICAOF NO ONE, as a forced CLUSTER FAILOVER TAKEOVER or a fast
// Sentinel does) still hands out fences above every fence issued before
// it. Master and replica in sync, 3 acquisitions; the replica cut off and
// promoted; 3 more on the old master, lost with it; then the first on the
// promoted replica. Before the fix its fence was the 4th one issued: the
// counter, less than a second behind the clock, went on from where the
// replica had it. Every primitive that draws fences, each from its own
// counter (a MultiMutex from one per name), and the mutex's script in its
// short form (the common call) and its long one.
func TestFenceAboveEveryIssuedAfterFastFailover(t *testing.T) {
	master, replica := startReplicated(t)
	old, promoted := master.Client(t), replica.Client(t)
	top := map[string]int64{} // the highest fence issued, per primitive and counter
	issue := func() {
		for _, p := range fencers(old) {
			for range 3 {
				for name, f := range draw(t, p).Fences() {
					top[p.name+" "+name] = max(top[p.name+" "+name], f)
				}
			}
		}
	}
	issue()
	// The replica has every counter. (Not WAIT: it sometimes takes a
	// second, when the replica acknowledges on its own schedule, and a
	// counter a second behind the clock hid the defect.)
	want := replOffset(t, old, "master_repl_offset")
	redistest.Eventually(t, "the replica to catch up", func() bool { return replOffset(t, promoted, "slave_repl_offset") >= want })
	if err := promoted.Do(t.Context(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	issue() // lost with the old master
	for _, p := range fencers(promoted) {
		for name, f := range draw(t, p).Fences() {
			if last := top[p.name+" "+name]; f <= last {
				t.Errorf("%s %s: fence %d after the failover; want above %d, the highest issued before it", p.name, name, f, last)
			}
		}
	}
}

// startReplicated starts a master and a replica of it, and waits until the
// replica is in sync.
func startReplicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
	_, port, err := net.SplitHostPort(master.Addr())
	if err != nil {
		t.Fatal(err)
	}
	replica = redistest.StartServer(t, "--replicaof", "127.0.0.1", port)
	// After a diskless sync the master streams writes to the replica only
	// from its first acknowledgement, up to a second later: write, and
	// wait for the write to be acknowledged.
	rdb := master.Client(t)
	if err := rdb.Set(t.Context(), "probe", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	wrote := replOffset(t, rdb, "master_repl_offset")
	acked := regexp.MustCompile(`slave0:.*,state=online,offset=(\d+),`)
	redistest.Eventually(t, "the replica in sync", func() bool {
		m := acked.FindStringSubmatch(rdb.Info(t.Context(), "replication").Val())
		if m == nil {
			return false
		}
		n, err := strconv.ParseInt(m[1], 10, 64)
		return err == nil && n >= wrote
	})
	return master, replica
}

// replOffset reads field, a replication offset, from rdb's INFO.
func replOffset(t *testing.T, rdb *redis.Client, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(rdb.Info(t.Context(), "replication").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO replication", field)
	return 0
}
