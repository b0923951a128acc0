package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartServerSetGet(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Addr() == "127.0.0.1:6379" {
		t.Errorf("Addr = %q; want a private 127.0.0.1 port", s.Addr())
	}
	if !s.Running() {
		t.Error("Running = false after StartServer; want true")
	}
	rdb := s.Client(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET = %q, %v; want %q, nil", got, err, "v")
	}
}

func TestStartServerAppliesArgs(t *testing.T) {
	t.Parallel()
	rdb := StartServer(t, "--maxmemory-policy", "allkeys-lru").Client(t)
	got, err := rdb.ConfigGet(t.Context(), "maxmemory-policy").Result()
	if err != nil || got["maxmemory-policy"] != "allkeys-lru" {
		t.Errorf("CONFIG GET maxmemory-policy = %v, %v; want allkeys-lru", got, err)
	}
	// The harness's own settings are in force too.
	if got, err := rdb.ConfigGet(t.Context(), "save").Result(); err != nil || got["save"] != "" {
		t.Errorf("CONFIG GET save = %v, %v; want empty", got, err)
	}
}

func TestStartServerFailsOnBadArgs(t *testing.T) {
	t.Parallel()
	requireServer(t)
	f := runFake(t, func(tb testing.TB) { StartServer(tb, "--no-such-option", "1") })
	if !strings.Contains(f.fatal, "exited before answering PING") || !strings.Contains(f.fatal, "no-such-option") {
		t.Errorf("StartServer with a bad option: Fatal(%q); want it to report the exit and the server's output", f.fatal)
	}
}

func TestKillMakesCommandsFail(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	ctx := t.Context()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING before Kill: %v", err)
	}
	s.Kill()
	if s.Running() {
		t.Error("Running = true after Kill; want false")
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Error("PING after Kill = nil; want an error")
	}
	s.Kill() // idempotent
	s.Pause()
	s.Resume()
}

func TestPauseTimesOutResumeAnswers(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING before Pause: %v", err)
	}

	s.Pause()
	start := time.Now()
	err := rdb.Ping(ctx).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("PING while paused = %v; want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("PING while paused took %v; want about the 100ms ReadTimeout", d)
	}
	if !s.Running() {
		t.Error("Running = false while paused; want true")
	}

	s.Resume()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Resume: %v", err)
	}
}

func TestRestartKeepsAddrAndDropsData(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	addr := s.Addr()
	rdb := s.Client(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Restart()
	if got := s.Addr(); got != addr {
		t.Errorf("Addr after Restart = %q; want %q", got, addr)
	}
	if !s.Running() {
		t.Error("Running = false after Restart; want true")
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != redis.Nil {
		t.Errorf("GET after Restart = %q, %v; want redis.Nil", got, err)
	}

	// Restart also brings back a killed server.
	s.Kill()
	s.Restart()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Kill and Restart: %v", err)
	}
}

func TestRestartFailsWhileAddrIsTaken(t *testing.T) {
	t.Parallel()
	requireServer(t)
	var s *Server
	f := runFake(t, func(tb testing.TB) { s = StartServer(tb) })
	if s == nil {
		t.Fatalf("StartServer: skip %q, fatal %q", f.skip, f.fatal)
	}
	s.Kill()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("take the killed server's address: %v", err)
	}
	f.run(s.Restart)
	if !strings.Contains(f.fatal, "Address already in use") || !strings.Contains(f.fatal, s.Addr()) {
		t.Errorf("Restart on a taken address: Fatal(%q); want the address and the server's bind error", f.fatal)
	}
	if s.Running() {
		t.Error("Running = true after a failed Restart; want false")
	}

	l.Close()
	f.fatal = ""
	f.run(s.Restart)
	if f.fatal != "" || !s.Running() {
		t.Errorf("Restart after the address was freed: Fatal(%q), Running %v; want success", f.fatal, s.Running())
	}
}

func TestParallelServersAreIndependent(t *testing.T) {
	t.Parallel()
	requireServer(t)
	var a, b *Server
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for i, p := range []**Server{&a, &b} {
		wg.Go(func() {
			f := runFake(t, func(tb testing.TB) { *p = StartServer(tb) })
			if f.fatal != "" || f.skip != "" {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("server %d: fatal %q, skip %q", i, f.fatal, f.skip))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(strings.Join(errs, "; "))
	}
	if a.Addr() == b.Addr() {
		t.Fatalf("both servers on %s", a.Addr())
	}
	ra, rb := a.Client(t), b.Client(t)
	ctx := t.Context()
	if err := ra.Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatalf("SET on a: %v", err)
	}
	if got, err := rb.Get(ctx, "k").Result(); err != redis.Nil {
		t.Errorf("GET on b = %q, %v; want redis.Nil", got, err)
	}
	b.Kill()
	if got, err := ra.Get(ctx, "k").Result(); err != nil || got != "a" {
		t.Errorf("GET on a after killing b = %q, %v; want %q, nil", got, err, "a")
	}
}

func TestCleanupKillsServer(t *testing.T) {
	t.Parallel()
	var addr string
	t.Run("start", func(t *testing.T) {
		addr = StartServer(t).Addr()
	})
	if addr == "" {
		t.Skip("subtest did not start a server")
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Errorf("dial %s after the test ended succeeded; want the server gone", addr)
	}
}

func TestEmbedded(t *testing.T) {
	t.Parallel()
	rdb := Embedded(t)
	ctx := t.Context()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("GET = %q, %v; want %q, nil", got, err, "v")
	}
}

func TestStartHonoursREDIS_ADDR(t *testing.T) {
	s := StartServer(t)
	direct := s.Client(t)
	ctx := t.Context()
	if err := direct.Set(ctx, "k", "from-server", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	t.Setenv("REDIS_ADDR", s.Addr())
	rdb := Start(t)
	if got := rdb.Options().Addr; got != s.Addr() {
		t.Errorf("Start client Addr = %q; want REDIS_ADDR %q", got, s.Addr())
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "from-server" {
		t.Errorf("GET through Start = %q, %v; want %q, nil", got, err, "from-server")
	}

	for name, fn := range map[string]func(testing.TB){
		"StartServer":   func(tb testing.TB) { StartServer(tb) },
		"StartCluster":  func(tb testing.TB) { StartCluster(tb, 1) },
		"StartWithArgs": func(tb testing.TB) { Start(tb, "--maxmemory", "1mb") },
	} {
		if f := runFake(t, fn); !strings.Contains(f.skip, "REDIS_ADDR") || f.fatal != "" {
			t.Errorf("%s with REDIS_ADDR set: skip %q, fatal %q; want a skip naming REDIS_ADDR", name, f.skip, f.fatal)
		}
	}
}

func TestMissingRedisServer(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("REDIS_ADDR", "")
	if Available() {
		t.Fatal("Available = true with an empty PATH; want false")
	}

	t.Run("local", func(t *testing.T) {
		t.Setenv("CI", "")
		for name, fn := range map[string]func(testing.TB){
			"StartServer":   func(tb testing.TB) { StartServer(tb) },
			"StartCluster":  func(tb testing.TB) { StartCluster(tb, 3) },
			"RequireServer": func(tb testing.TB) { RequireServer(tb) },
		} {
			if f := runFake(t, fn); f.skip != installHint || f.fatal != "" {
				t.Errorf("%s: skip %q, fatal %q; want skip %q", name, f.skip, f.fatal, installHint)
			}
		}

		var rdb *redis.Client
		f := runFake(t, func(tb testing.TB) { rdb = Start(tb) })
		if f.skip != "" || f.fatal != "" {
			t.Fatalf("Start: skip %q, fatal %q; want the embedded fallback", f.skip, f.fatal)
		}
		if len(f.logs) != 1 || !strings.Contains(f.logs[0], "miniredis") || !strings.Contains(f.logs[0], "apt-get install") {
			t.Errorf("Start logged %q; want one line naming miniredis and the install hint", f.logs)
		}
		if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err != nil {
			t.Errorf("SET on the fallback: %v", err)
		}
	})

	t.Run("CI", func(t *testing.T) {
		t.Setenv("CI", "true")
		for name, fn := range map[string]func(testing.TB){
			"Start":         func(tb testing.TB) { Start(tb) },
			"StartServer":   func(tb testing.TB) { StartServer(tb) },
			"StartCluster":  func(tb testing.TB) { StartCluster(tb, 3) },
			"RequireServer": func(tb testing.TB) { RequireServer(tb) },
		} {
			if f := runFake(t, fn); f.fatal != installHint {
				t.Errorf("%s: fatal %q, skip %q; want fatal %q", name, f.fatal, f.skip, installHint)
			}
		}
	})
}

func TestClusterSpreadsKeysOverAllMasters(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Nodes) != 3 || len(c.Addrs()) != 3 {
		t.Fatalf("cluster has %d nodes, %d addrs; want 3", len(c.Nodes), len(c.Addrs()))
	}
	cc := c.Client(t)
	ctx := t.Context()
	for i := range 100 {
		if err := cc.Set(ctx, fmt.Sprint("key:", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	for i := range 100 {
		if got, err := cc.Get(ctx, fmt.Sprint("key:", i)).Int(); err != nil || got != i {
			t.Fatalf("GET key:%d = %d, %v; want %d, nil", i, got, err, i)
		}
	}

	var mu sync.Mutex
	sizes := map[string]int64{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, rdb *redis.Client) error {
		n, err := rdb.DBSize(ctx).Result()
		mu.Lock()
		sizes[rdb.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("ForEachMaster DBSIZE: %v", err)
	}
	var total int64
	for _, addr := range c.Addrs() {
		if sizes[addr] == 0 {
			t.Errorf("master %s holds no keys (sizes %v); want all 3 masters used", addr, sizes)
		}
		total += sizes[addr]
	}
	if len(sizes) != 3 || total != 100 {
		t.Errorf("DBSIZE by master = %v; want 3 masters holding 100 keys", sizes)
	}
}

func TestOneNodeCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 1)
	cc := c.Client(t)
	if err := cc.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Errorf("SET on a one-node cluster: %v", err)
	}
}

func TestClusterShardedPubSub(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	owners := map[string]bool{}
	for i := range 6 {
		ch := fmt.Sprint("news:", i)
		owner, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			t.Fatalf("MasterForKey(%q): %v", ch, err)
		}
		owners[owner.Options().Addr] = true

		ps := cc.SSubscribe(ctx, ch)
		if _, err := ps.Receive(ctx); err != nil {
			ps.Close()
			t.Fatalf("SSUBSCRIBE %s: %v", ch, err)
		}
		if n, err := cc.SPublish(ctx, ch, "hello").Result(); err != nil || n != 1 {
			t.Errorf("SPUBLISH %s = %d, %v; want 1 receiver", ch, n, err)
		}
		msg, err := ps.ReceiveMessage(ctx)
		if err != nil || msg.Channel != ch || msg.Payload != "hello" {
			t.Errorf("ReceiveMessage on %s = %+v, %v; want hello", ch, msg, err)
		}
		ps.Close()
	}
	if len(owners) < 2 {
		t.Errorf("channels landed on masters %v; want more than one", owners)
	}
}

func TestClusterNodeRestartRejoins(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	cc := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Find a key served by Nodes[1].
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprint("k", i)
		m, err := cc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		if m.Options().Addr == c.Nodes[1].Addr() {
			key = k
		}
	}
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}

	c.Nodes[1].Restart()
	// The node keeps its ID and slots, so the cluster heals by itself.
	direct := c.Nodes[1].Client(t)
	for {
		info, err := direct.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("restarted node never reported cluster_state:ok: %v\n%s", err, info)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got, err := cc.Get(ctx, key).Result(); err != redis.Nil {
		t.Errorf("GET %s after restart = %q, %v; want redis.Nil (data is not saved)", key, got, err)
	}
	if err := cc.Set(ctx, key, "again", 0).Err(); err != nil {
		t.Errorf("SET %s after restart: %v", key, err)
	}
}

// requireServer skips or fails t as StartServer would, for tests that call
// StartServer through a fakeTB.
func requireServer(t *testing.T) {
	t.Helper()
	if os.Getenv("REDIS_ADDR") != "" {
		t.Skip("REDIS_ADDR is set; this test needs a private redis-server")
	}
	if !Available() {
		if os.Getenv("CI") != "" {
			t.Fatal(installHint)
		}
		t.Skip(installHint)
	}
}

// fakeTB records what a helper reports instead of ending the test. Fatal and
// Skip end the calling goroutine, as the real ones do; run helpers with runFake.
type fakeTB struct {
	testing.TB
	mu          sync.Mutex
	logs        []string
	fatal, skip string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprint(args...))
}

func (f *fakeTB) Logf(format string, args ...any) { f.Log(fmt.Sprintf(format, args...)) }

func (f *fakeTB) Fatal(args ...any) { f.end(&f.fatal, fmt.Sprint(args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) { f.end(&f.fatal, fmt.Sprintf(format, args...)) }

func (f *fakeTB) Skip(args ...any) { f.end(&f.skip, fmt.Sprint(args...)) }

func (f *fakeTB) Skipf(format string, args ...any) { f.end(&f.skip, fmt.Sprintf(format, args...)) }

func (f *fakeTB) end(field *string, msg string) {
	f.mu.Lock()
	*field = msg
	f.mu.Unlock()
	runtime.Goexit()
}

// runFake runs fn with a fakeTB whose Cleanup, Context and TempDir are t's,
// and returns it once fn has returned, failed or skipped.
func runFake(t *testing.T, fn func(testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	f.run(func() { fn(f) })
	return f
}

// run calls fn on a new goroutine, so that Fatal and Skip end only fn, and
// waits for it.
func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

// TestBackends: every deployment answers, and the ring and the sentinel
// are the real thing (keys spread over both shards; a failover client
// writes to the master, which replicates to the replica).
func TestBackends(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, b Backend) {
		c := b.Client(t)
		if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v := c.Get(t.Context(), "k").Val(); v != "v" {
			t.Errorf("GET = %q; want v", v)
		}
	})
}

func TestRingSpreadsKeys(t *testing.T) {
	r := StartRing(t, 2)
	c := r.Client(t)
	for i := range 100 {
		if err := c.Set(t.Context(), "k"+strconv.Itoa(i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range r.Shards {
		if n := s.Client(t).DBSize(t.Context()).Val(); n == 0 {
			t.Errorf("shard %d holds no key of 100", i)
		}
	}
}

func TestSentinelReplicates(t *testing.T) {
	s := StartSentinel(t)
	c := s.Client(t)
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replica := s.Replica.Client(t)
	Eventually(t, "the write through the failover client on the replica", func() bool {
		return replica.Get(t.Context(), "k").Val() == "v"
	})
}

// TestClusterFailover: on a cluster whose masters have a replica each, a
// graceful failover hands a master's slots to its replica with its data,
// and the old master follows it; when the new master is killed, the old
// one, now its replica, is promoted and takes writes again.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := StartClusterReplicas(t, 3, 1)
	if len(c.Nodes) != 3 || len(c.Replicas) != 3 || len(c.Replicas[0]) != 1 {
		t.Fatalf("cluster has %d masters, replicas %v; want 3 with one each", len(c.Nodes), c.Replicas)
	}
	cc := c.Client(t)
	ctx := t.Context()
	key := keyOn(t, cc, c.Nodes[0])
	if err := cc.Set(ctx, key, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replica := c.Replicas[0][0]
	c.Failover(t, replica)
	if role := roleOf(t, c.Nodes[0]); role != "slave" {
		t.Errorf("old master's role after the failover = %s; want slave", role)
	}
	if role := roleOf(t, replica); role != "master" {
		t.Errorf("replica's role after the failover = %s; want master", role)
	}
	if got, err := replica.Client(t).Get(ctx, key).Result(); err != nil || got != "v1" {
		t.Errorf("GET %s on the new master = %q, %v; want v1", key, got, err)
	}
	if err := cc.Set(ctx, key, "v2", 0).Err(); err != nil { // follows the MOVED
		t.Fatalf("SET %s after the failover: %v", key, err)
	}

	replica.Kill()
	start := time.Now()
	c.AwaitPromotion(t, c.Nodes[0])
	t.Logf("old master promoted back %v after its replacement was killed", time.Since(start))
	if got, err := c.Nodes[0].Client(t).Get(ctx, key).Result(); err != nil || got != "v2" {
		t.Errorf("GET %s on the promoted node = %q, %v; want v2", key, got, err)
	}
	// A fresh client: cc still routes the slot to the dead node, as
	// go-redis does until its next reload of the slots (a minute).
	if err := c.Client(t).Set(ctx, key, "v3", 0).Err(); err != nil {
		t.Errorf("SET %s after the promotion: %v", key, err)
	}
}

// keyOn returns a key whose slot s owns.
func keyOn(t *testing.T, cc *redis.ClusterClient, s *Server) string {
	t.Helper()
	for i := 0; ; i++ {
		k := fmt.Sprint("k", i)
		m, err := cc.MasterForKey(t.Context(), k)
		if err != nil {
			t.Fatalf("MasterForKey: %v", err)
		}
		if m.Options().Addr == s.Addr() {
			return k
		}
	}
}

// roleOf returns s's replication role (INFO replication).
func roleOf(t *testing.T, s *Server) string {
	t.Helper()
	info, err := s.Client(t).Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if role, ok := strings.CutPrefix(line, "role:"); ok {
			return strings.TrimSpace(role)
		}
	}
	return ""
}

// TestClusterFailoverTwoReplicas: when one of a master's two replicas takes
// over, the other one replicates it from then on.
func TestClusterFailoverTwoReplicas(t *testing.T) {
	t.Parallel()
	c := StartClusterReplicas(t, 3, 2)
	next, other := c.Replicas[1][0], c.Replicas[1][1]
	c.Failover(t, next) // waits for other to follow next, in sync
	if role := roleOf(t, other); role != "slave" {
		t.Errorf("other replica's role = %s; want slave", role)
	}
	info, err := other.Client(t).Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, port, _ := strings.Cut(next.Addr(), ":"); !strings.Contains(info, "master_port:"+port+"\r\n") {
		t.Errorf("other replica does not replicate the new master %s:\n%s", next.Addr(), info)
	}
}
