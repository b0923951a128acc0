package demo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) {
	if IsWorker() {
		os.Exit(ServeWorker(testWork))
	}
	goleak.VerifyTestMain(m)
}

func TestNewClientParsesURLs(t *testing.T) {
	tests := []struct {
		spec, addr, user, pass string
		db                     int
		tls                    bool
	}{
		{spec: "localhost:6380", addr: "localhost:6380"},
		{spec: "redis://localhost:6379/3", addr: "localhost:6379", db: 3},
		{spec: "redis://:secret@h:1/2", addr: "h:1", pass: "secret", db: 2},
		{spec: "rediss://u:p@h:6380", addr: "h:6380", user: "u", pass: "p", tls: true},
	}
	for _, tt := range tests {
		c, url, err := NewClient(tt.spec)
		if err != nil {
			t.Errorf("NewClient(%q): %v", tt.spec, err)
			continue
		}
		rc, ok := c.(*redis.Client)
		if !ok {
			t.Errorf("NewClient(%q) = %T; want *redis.Client", tt.spec, c)
			continue
		}
		o := rc.Options()
		if o.Addr != tt.addr || o.Username != tt.user || o.Password != tt.pass || o.DB != tt.db || (o.TLSConfig != nil) != tt.tls {
			t.Errorf("NewClient(%q) = addr %q user %q pass %q db %d tls %v; want %q %q %q %d %v",
				tt.spec, o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil, tt.addr, tt.user, tt.pass, tt.db, tt.tls)
		}
		if !strings.Contains(url, "://") {
			t.Errorf("NewClient(%q) URL = %q; want a URL", tt.spec, url)
		}
		_ = c.Close()
	}
}

func TestNewClientCommaAddressesMakeCluster(t *testing.T) {
	for _, spec := range []string{
		"a:7000,b:7001,c:7002",
		"redis://:pw@a:7000,b:7001,c:7002",
		"rediss://u:pw@a:7000,b:7001,c:7002?dial_timeout=2s",
	} {
		c, _, err := NewClient(spec)
		if err != nil {
			t.Errorf("NewClient(%q): %v", spec, err)
			continue
		}
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			t.Errorf("NewClient(%q) = %T; want *redis.ClusterClient", spec, c)
			continue
		}
		o := cc.Options()
		if want := []string{"a:7000", "b:7001", "c:7002"}; !slices.Equal(o.Addrs, want) {
			t.Errorf("NewClient(%q) addrs = %q; want %q", spec, o.Addrs, want)
		}
		if strings.Contains(spec, "pw@") && o.Password != "pw" {
			t.Errorf("NewClient(%q) password = %q; want pw", spec, o.Password)
		}
		if strings.HasPrefix(spec, "rediss") && (o.TLSConfig == nil || o.TLSConfig.ServerName != "a") {
			t.Errorf("NewClient(%q) TLS = %+v; want ServerName a", spec, o.TLSConfig)
		}
		if strings.Contains(spec, "dial_timeout") && o.DialTimeout != 2*time.Second {
			t.Errorf("NewClient(%q) DialTimeout = %v; want 2s", spec, o.DialTimeout)
		}
		_ = c.Close()
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	for _, spec := range []string{"", "http://h:1", "redis://h:1/notadb", "a:1,,b:2"} {
		if c, _, err := NewClient(spec); err == nil {
			_ = c.Close()
			t.Errorf("NewClient(%q) succeeded; want an error", spec)
		}
	}
}

func TestRedactHidesPassword(t *testing.T) {
	if got := Redact("redis://user:s3cret@h:1/0"); strings.Contains(got, "s3cret") || !strings.Contains(got, "h:1/0") {
		t.Errorf("Redact = %q; want the password hidden and the rest kept", got)
	}
}

func TestConnectFallsBackToEmbedded(t *testing.T) {
	var out bytes.Buffer
	c, err := Connect(t.Context(), "", redistest.DeadAddr(t), &out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Embedded {
		t.Errorf("Embedded = false; want true")
	}
	if lines := strings.Count(out.String(), "\n"); lines != 1 || !strings.Contains(out.String(), "embedded miniredis") {
		t.Errorf("output = %q; want one line about the embedded miniredis", out.String())
	}
	if err := c.Client.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Errorf("SET on embedded server: %v", err)
	}
}

func TestConnectUsesProbeWhenItAnswers(t *testing.T) {
	srv := redistest.StartServer(t)
	var out bytes.Buffer
	c, err := Connect(t.Context(), "", srv.Addr(), &out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Embedded || out.Len() != 0 {
		t.Errorf("Embedded = %v, output %q; want the probed server, silently", c.Embedded, out.String())
	}
	if c.URL != "redis://"+srv.Addr() {
		t.Errorf("URL = %q; want redis://%s", c.URL, srv.Addr())
	}
}

func TestConnectReportsDeadServer(t *testing.T) {
	_, err := Connect(t.Context(), "redis://:pw@"+redistest.DeadAddr(t), "", &bytes.Buffer{})
	if err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("Connect to a dead server: err = %v; want an error without the password", err)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h, g Histogram
	for i := 1; i <= 99; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	g.Record(time.Second)
	h.Merge(g)
	within := func(got, want time.Duration) bool {
		return got >= want && float64(got) <= float64(want)*1.05
	}
	if got := h.Quantile(0.5); !within(got, 50*time.Millisecond) {
		t.Errorf("p50 = %v; want 50ms (+5%%)", got)
	}
	if got := h.Quantile(0.99); !within(got, 99*time.Millisecond) {
		t.Errorf("p99 = %v; want 99ms (+5%%)", got)
	}
	if got := h.Quantile(1); got != time.Second || h.Max != time.Second || h.N != 100 {
		t.Errorf("max = %v / %v, n = %d; want 1s, 100", got, h.Max, h.N)
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Errorf("empty histogram quantile/mean not 0")
	}
}

func TestCmdCounterCountsPipelines(t *testing.T) {
	rdb := redistest.Start(t)
	var n CmdCounter
	rdb.AddHook(&n)
	ctx := t.Context()
	rdb.Set(ctx, "a", 1, 0)
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "a")
		p.Incr(ctx, "a")
		return nil
	})
	if got := n.Load(); got != 3 {
		t.Errorf("commands = %d; want 3", got)
	}
}

type testTask struct {
	ID    int    `json:"id"`
	Fail  bool   `json:"fail"`
	Block bool   `json:"block"`
	Key   string `json:"key"`
}

type testResult struct {
	ID  int   `json:"id"`
	Pid int   `json:"pid"`
	N   int64 `json:"n"`
}

// testWork increments a shared key, so the test sees that every worker
// reached the parent's server.
func testWork(ctx context.Context, c *Conn, t testTask, p *Counters) (testResult, error) {
	if t.Fail {
		return testResult{}, errors.New("task failed on purpose")
	}
	if t.Block {
		<-ctx.Done()
		return testResult{}, ctx.Err()
	}
	n, err := c.Client.Incr(ctx, t.Key).Result()
	p.Add("incr", 1)
	return testResult{ID: t.ID, Pid: os.Getpid(), N: n}, err
}

func TestRunInWorkerProcesses(t *testing.T) {
	rdb := redistest.Start(t)
	conn := &Conn{Client: rdb, URL: "redis://" + rdb.Options().Addr}
	tasks := []testTask{{ID: 0, Key: "k"}, {ID: 1, Key: "k"}, {ID: 2, Key: "k"}}
	res, err := Run(t.Context(), Fleet{Conn: conn, Procs: 3, Counters: []string{"incr"}}, tasks, testWork)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{os.Getpid(): true}
	for i, r := range res {
		if r.ID != i || pids[r.Pid] {
			t.Errorf("result %d = %+v; want id %d from a fresh process", i, r, i)
		}
		pids[r.Pid] = true
	}
	if n, _ := rdb.Get(t.Context(), "k").Int(); n != 3 {
		t.Errorf("k = %d; want 3 (one INCR per worker)", n)
	}
}

func TestRunInProcess(t *testing.T) {
	rdb := redistest.Start(t)
	conn := &Conn{Client: rdb}
	res, err := Run(t.Context(), Fleet{Conn: conn, Procs: 1}, []testTask{{Key: "k"}}, testWork)
	if err != nil || len(res) != 1 || res[0].Pid != os.Getpid() || res[0].N != 1 {
		t.Errorf("Run = %+v, %v; want one result from this process", res, err)
	}
}

func TestRunReportsWorkerError(t *testing.T) {
	rdb := redistest.Start(t)
	conn := &Conn{Client: rdb, URL: "redis://" + rdb.Options().Addr}
	tasks := []testTask{{Key: "k", Block: true}, {Fail: true}}
	_, err := Run(t.Context(), Fleet{Conn: conn, Procs: 2}, tasks, testWork)
	if err == nil || !strings.Contains(err.Error(), "task failed on purpose") {
		t.Errorf("Run = %v; want the worker's error", err)
	}
}

func TestRunStopsWorkersOnCancel(t *testing.T) {
	rdb := redistest.Start(t)
	conn := &Conn{Client: rdb, URL: "redis://" + rdb.Options().Addr}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Fleet{Conn: conn, Procs: 2}, []testTask{{Block: true}, {Block: true}}, testWork)
	if err == nil {
		t.Errorf("Run of blocked workers with a cancelled ctx succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Run took %v after cancel; want prompt", d)
	}
}

func TestProgressStartsAfterTwoSeconds(t *testing.T) {
	calls := make(chan map[string]int64, 10)
	stop := startProgress(func(_ time.Duration, m map[string]int64) { calls <- m },
		func() map[string]int64 { return map[string]int64{"x": 1} })
	time.Sleep(100 * time.Millisecond)
	stop()
	if len(calls) != 0 {
		t.Errorf("progress called within 100ms; want nothing for short runs")
	}
}

func TestTableAlignsWithoutTrailingSpaces(t *testing.T) {
	var b strings.Builder
	if err := Table(&b, [][]string{{"name", "value", "check"}, {"served", "8", ""}, {"max holders", "1", "ok"}}); err != nil {
		t.Fatal(err)
	}
	want := "name         value  check\n----         -----  -----\nserved       8\nmax holders  1      ok\n"
	if b.String() != want {
		t.Errorf("Table =\n%s\nwant\n%s", b.String(), want)
	}
}

func TestConnectExplainsPasswordProtectedProbe(t *testing.T) {
	// redistest cannot start a server with --requirepass (its readiness probe
	// sends no password), so set the password once it runs.
	srv := redistest.StartServer(t)
	if err := srv.Client(t).ConfigSet(t.Context(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c, err := Connect(t.Context(), "", srv.Addr(), &out)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Embedded || !strings.Contains(out.String(), "wants a password") {
		t.Errorf("Embedded = %v, output %q; want the embedded server and the reason", c.Embedded, out.String())
	}
	c2, err := Connect(t.Context(), "redis://:s3cret@"+srv.Addr(), "", &out)
	if err != nil {
		t.Fatalf("Connect with the password: %v", err)
	}
	defer c2.Close()
}

func TestEmbeddedKeysExpireInRealTime(t *testing.T) {
	c, err := Connect(t.Context(), "", "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Client.Set(t.Context(), "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for c.Client.Exists(t.Context(), "k").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 50ms TTL still exists after 2s on the embedded server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
