package dogpile_test

// WithStaleIfDown on a Cluster with one master frozen. A client has one
// circuit breaker (internal/breaker.For), whose check PINGs every master:
// one frozen master opens the circuit of the whole client, so every call
// on it is turned away, whatever master holds its key. The near tier is
// one Index for all masters, down while any master's tracking is lost:
// that loss is what keeps the copies, of keys on every master.

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// frozenClusterClient is frozenClient for a Cluster: reads give up after
// 200 ms, so that the breaker's PING of a frozen master waits as long, and
// the nodes' clients do not retry. MaxRedirects is left as it is (MOVED
// must be followed), so the cluster client retries a read that timed out
// 3 times: a call to the frozen master takes about a second, and the
// circuit opens about two seconds after the freeze (the breaker's check starts
// once a call has failed, and takes a few hundred ms).
func frozenClusterClient(t *testing.T, cl *redistest.Cluster) *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// masterOf returns the address of the master that holds c's value of key.
func masterOf(t *testing.T, rdb *redis.ClusterClient, c *dogpile.Cache[string], key string) string {
	t.Helper()
	n, err := rdb.MasterForKey(t.Context(), dogpile.KeysOf(c, key).Value)
	if err != nil {
		t.Fatalf("the master of %q: %v", key, err)
	}
	return n.Options().Addr
}

// keyOn returns the first of base0, base1, ... whose value in c is held
// by the master at addr.
func keyOn(t *testing.T, rdb *redis.ClusterClient, c *dogpile.Cache[string], addr, base string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if k := fmt.Sprint(base, i); masterOf(t, rdb, c, k) == addr {
			return k
		}
	}
	t.Fatalf("no key %s<n> on %s", base, addr)
	return ""
}

// warmSpread warms keys k0..k11 into c's near tier with the value v1 (see
// warmSteady) and returns them by master, failing t unless each of cl's
// masters holds one.
func warmSpread(t *testing.T, cl *redistest.Cluster, rdb *redis.ClusterClient, c *dogpile.Cache[string]) map[string][]string {
	t.Helper()
	by := make(map[string][]string)
	for i := range 12 {
		k := fmt.Sprint("k", i)
		by[masterOf(t, rdb, c, k)] = append(by[masterOf(t, rdb, c, k)], k)
	}
	for _, s := range cl.Nodes {
		if len(by[s.Addr()]) == 0 {
			t.Fatalf("no key on master %s: %v", s.Addr(), by)
		}
	}
	warmSteady(t, c, func() {
		for _, keys := range by {
			for _, k := range keys {
				warmNear(t, c, k, time.Minute, "v1")
			}
		}
	})
	return by
}

// warmSteady runs warm (warmNear calls) until no loss of tracking came
// meanwhile: on a loaded machine a late ping may end a session, and
// tracking's return empties the tier, taking the copies warmed before.
func warmSteady(t *testing.T, c *dogpile.Cache[string], warm func()) {
	t.Helper()
	redistest.Eventually(t, "a warm-up without a loss of tracking", func() bool {
		flushes := c.Stats().NearFlushes
		warm()
		return c.Stats().NearFlushes == flushes
	})
}

// freezeMaster pauses s (resumed when the test ends) and waits until a
// Fetch on c of probe, a key on s that c never read, fails with
// ErrUnavailable: c's client's circuit is open. (freeze's key may live on
// another master, whose reads would never open it.)
func freezeMaster(t *testing.T, s *redistest.Server, c *dogpile.Cache[string], probe string) {
	t.Helper()
	s.Pause()
	t.Cleanup(s.Resume)
	redistest.Eventually(t, "the circuit to open", func() bool {
		_, err := c.Fetch(t.Context(), probe, time.Minute, redistest.NoCompute[string])
		return errors.Is(err, dogpile.ErrUnavailable)
	})
}

// resume resumes s, a master of cl, and waits until the circuit of c's
// client has closed (a Fetch of probe, a key on s, is let through) and
// every master reports cluster_state:ok. A master frozen past the nodes'
// cluster-node-timeout (2 s here: about as long as the circuit takes to
// open) is marked FAIL, and the others refuse every key (CLUSTERDOWN)
// until it has been back for up to twice that; an error reply is no
// outage to the breaker, so meanwhile the circuit is closed and Fetch
// fails, kept copy or not.
func resume(t *testing.T, cl *redistest.Cluster, s *redistest.Server, c *dogpile.Cache[string], probe string) {
	t.Helper()
	admins := make([]*redis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		admins[i] = n.Client(t)
	}
	s.Resume()
	redistest.Eventually(t, "the circuit to close and the cluster to be ok", func() bool {
		_, err := c.Fetch(t.Context(), probe, time.Minute, redistest.NoCompute[string])
		if errors.Is(err, dogpile.ErrUnavailable) || dogpile.BreakerOpen(c) {
			return false
		}
		for _, a := range admins {
			if info, err := a.ClusterInfo(t.Context()).Result(); err != nil || !strings.Contains(info, "cluster_state:ok\r\n") {
				return false
			}
		}
		return true
	})
}

// staleIfDownCluster is a Cache on rdb with the near tier, WithStale(stale)
// and WithStaleIfDown. Once hold is called, tracking lost on a master is
// not set up again until release is (or the test ends): the copies kept
// stay in the tier after the master is back, so that what is checked then
// is that they are not served, not that they are gone. Not held from the
// start: a loss during the warm-up (a ping late on a loaded machine) would
// keep tracking down before the copies are in.
func staleIfDownCluster(t *testing.T, rdb *redis.ClusterClient, stale time.Duration) (c *dogpile.Cache[string], hold, release func()) {
	c = dogpile.New[string](rdb, prefix(t), dogpile.WithNearCache(100), dogpile.WithNearTest(),
		dogpile.WithStale(stale), dogpile.WithStaleIfDown())
	t.Cleanup(func() { _ = c.Close() })
	var holding atomic.Bool
	gate := make(chan struct{})
	release = sync.OnceFunc(func() { close(gate) })
	dogpile.Tracker(c).BeforeSession = func() { // set before the tracker starts
		if holding.Load() {
			<-gate
		}
	}
	t.Cleanup(release) // before Close, which waits for the sessions
	return c, func() { holding.Store(true) }, release
}

// TestStaleIfDownClusterFrozenMaster: with one master of three frozen, once
// the circuit is open, the kept copies of keys on every master are served,
// each counted in StaleIfDown: the client's circuit is one, so the live
// masters' keys are turned away too, and a key on a live master that was
// never read fails with ErrUnavailable. Once the master answers and the
// circuit has closed, a value a second client wrote is what Fetch returns,
// never the copy still held; and that copy is not served in a second
// outage either.
func TestStaleIfDownClusterFrozenMaster(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	cl := redistest.StartCluster(t, 3)
	rdb := frozenClusterClient(t, cl)
	c, hold, release := staleIfDownCluster(t, rdb, time.Minute)
	frozen, live := cl.Nodes[1], cl.Nodes[2]
	by := warmSpread(t, cl, rdb, c)
	kf, kl := by[frozen.Addr()][0], by[live.Addr()][0]
	probe := keyOn(t, rdb, c, frozen.Addr(), "probe")

	hold()
	freezeMaster(t, frozen, c, probe)
	// Tracking's loss may be seen after the circuit opened: until then
	// nothing is kept, and Fetch fails.
	redistest.Eventually(t, "the frozen master's key served", func() bool {
		v, err := c.Fetch(t.Context(), kf, time.Minute, redistest.NoCompute[string])
		if err == nil && v != "v1" {
			t.Fatalf("Fetch(%q) = %q; want the kept copy v1", kf, v)
		}
		return err == nil
	})
	assertKeptServed(t, c, by)
	unread := keyOn(t, rdb, c, live.Addr(), "unread")
	if v, err := c.Fetch(t.Context(), unread, time.Minute, redistest.NoCompute[string]); !errors.Is(err, dogpile.ErrUnavailable) {
		t.Errorf("Fetch of a key on a live master never read = %q, %v; want ErrUnavailable (the circuit is the client's)", v, err)
	}

	resume(t, cl, frozen, c, probe)
	if !dogpile.NearIndex(c).Kept() || !dogpile.NearHas(c, kf) || !dogpile.NearHas(c, kl) {
		t.Fatal("the copies are no longer kept: the checks below prove nothing")
	}
	writer := dogpile.New[string](cl.Client(t), prefix(t), dogpile.WithStale(time.Minute))
	t.Cleanup(func() { _ = writer.Close() })
	if err := writer.Set(t.Context(), kf, "v2", time.Minute); err != nil {
		t.Fatalf("Set(%q) by a second client: %v", kf, err)
	}
	if v, err := c.Fetch(t.Context(), kf, time.Minute, redistest.NoCompute[string]); err != nil || v != "v2" {
		t.Errorf("Fetch(%q) once the circuit closed = %q, %v; want v2, never the kept copy", kf, v, err)
	}

	// A second outage: kl's copy, kept before the circuit closed, is stale
	// news (its master answered meanwhile).
	freezeMaster(t, frozen, c, probe)
	if !dogpile.NearHas(c, kl) {
		t.Fatalf("%q's copy is no longer kept: the check below proves nothing", kl)
	}
	if v, err := c.Fetch(t.Context(), kl, time.Minute, redistest.NoCompute[string]); !errors.Is(err, dogpile.ErrUnavailable) {
		t.Errorf("Fetch(%q) in a second outage = %q, %v; want ErrUnavailable", kl, v, err)
	}

	resume(t, cl, frozen, c, probe)
	release()
	redistest.Eventually(t, "tracking up, nothing kept", func() bool {
		x := dogpile.NearIndex(c)
		return x.Up() && !x.Kept()
	})
	if v := dogpile.FetchNear(t, c, kf); v != "v2" {
		t.Errorf("near hit of %q after tracking came back = %q; want v2", kf, v)
	}
}

// assertKeptServed checks that each key of by, on whatever master, is
// answered with its kept copy v1, as a stale near hit counted in
// StaleIfDown: none is read from a live master.
func assertKeptServed(t *testing.T, c *dogpile.Cache[string], by map[string][]string) {
	t.Helper()
	before, n := c.Stats(), 0
	for addr, keys := range by {
		for _, k := range keys {
			n++
			if v, err := c.Fetch(t.Context(), k, time.Minute, redistest.NoCompute[string]); err != nil || v != "v1" {
				t.Errorf("Fetch(%q) of master %s = %q, %v; want the kept copy v1", k, addr, v, err)
			}
		}
	}
	after := c.Stats()
	if d, s := after.StaleIfDown-before.StaleIfDown, after.Stale-before.Stale; d != uint64(n) || s != uint64(n) {
		t.Errorf("%d Fetches counted StaleIfDown %d, Stale %d; want each counted", n, d, s)
	}
}

// TestStaleIfDownClusterStalePoint: with one master frozen, a copy of a
// key on it is served only up to its stale point (TTL plus stale window),
// while a copy with a later one, on the same master, still is.
func TestStaleIfDownClusterStalePoint(t *testing.T) {
	t.Parallel() // it waits on servers of its own, and touches no package state
	const ttl, stale = 1 * time.Second, time.Second
	cl := redistest.StartCluster(t, 3)
	rdb := frozenClusterClient(t, cl)
	c, _, _ := staleIfDownCluster(t, rdb, stale)
	frozen := cl.Nodes[0]
	long := keyOn(t, rdb, c, frozen.Addr(), "long")
	short := keyOn(t, rdb, c, frozen.Addr(), "short")
	warmSteady(t, c, func() {
		warmNear(t, c, long, time.Hour, "l")
		warmNear(t, c, short, ttl, "s")
	})
	stalePoint := time.Now().Add(ttl + stale) // after its expiry in Redis: the Set returned before

	freezeMaster(t, frozen, c, keyOn(t, rdb, c, frozen.Addr(), "probe"))
	// Polled, not slept through: each Fetch keeps the Cache from going
	// idle (near.Config.Idle, 1 s here). An idle tracker ends its sessions
	// itself, which empties the tier if it comes before the frozen
	// master's loss is seen (on a loaded machine, it may).
	redistest.Eventually(t, "the stale point passed, the long key's copy served", func() bool {
		_, err := c.Fetch(t.Context(), long, time.Hour, redistest.NoCompute[string])
		return err == nil && time.Now().After(stalePoint.Add(200*time.Millisecond))
	})
	before := c.Stats().StaleIfDown
	if v, err := c.Fetch(t.Context(), short, ttl, redistest.NoCompute[string]); !errors.Is(err, dogpile.ErrUnavailable) {
		t.Errorf("Fetch past the stale point = %q, %v; want ErrUnavailable", v, err)
	}
	if !dogpile.NearHas(c, short) {
		t.Error("the short key's copy was not kept: the check above proves nothing")
	}
	if got := c.Stats().StaleIfDown; got != before {
		t.Errorf("StaleIfDown went from %d to %d on a copy past its stale point", before, got)
	}
}
