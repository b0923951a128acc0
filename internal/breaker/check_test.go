package breaker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestCheckFrozenServer: the check finds a frozen server (SIGSTOP: it
// accepts connections but answers nothing) and a dead one, each named
// with why, and finds a working one answering though every connection of
// the client's pool is in use.
func TestCheckFrozenServer(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	check := checker(rdb)
	ctx := t.Context()

	conn := rdb.Conn() // the pool's one connection, held
	if err := conn.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := check(ctx); err != nil {
		t.Fatalf("check of a working server, the client's pool in use: %v", err)
	}
	_ = conn.Close()

	s.Pause()
	start := time.Now()
	err := check(ctx)
	took := time.Since(start)
	s.Resume()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), s.Addr()+": no reply to PING within 500ms") {
		t.Fatalf("check of a frozen server = %v; want ErrUnavailable naming %s, no reply", err, s.Addr())
	}
	if took < maxCheckWait || took > 10*maxCheckWait {
		t.Errorf("check of a frozen server took %v; want its wait, %v", took, maxCheckWait)
	}
	if err := check(ctx); err != nil {
		t.Fatalf("check once the server runs again: %v", err)
	}
	s.Kill()
	if err := check(ctx); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("check of a dead server = %v; want ErrUnavailable, connection refused", err)
	}
}

// TestCheckWaitFollowsReadTimeout: a client whose ReadTimeout is below
// the check's wait says a working Redis never takes that long: the check
// waits that long, no longer.
func TestCheckWaitFollowsReadTimeout(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	s.Pause()
	defer s.Resume()
	err := checker(rdb)(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no reply to PING within 100ms") {
		t.Errorf("check of a frozen server = %v; want no reply within the client's ReadTimeout", err)
	}
}

// TestCheckCluster: on a Cluster the check asks every master and names
// the one that does not answer, alone.
func TestCheckCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	ctx := t.Context()
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	check := checker(rdb)
	if err := check(ctx); err != nil {
		t.Fatalf("check of a working cluster: %v", err)
	}
	frozen := cl.Nodes[1]
	frozen.Pause()
	err := check(ctx)
	frozen.Resume()
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), frozen.Addr()+": no reply") {
		t.Fatalf("check with one master frozen = %v; want ErrUnavailable naming %s", err, frozen.Addr())
	}
	for _, n := range []*redistest.Server{cl.Nodes[0], cl.Nodes[2]} {
		if strings.Contains(err.Error(), n.Addr()) {
			t.Errorf("check named %s, which answers: %v", n.Addr(), err)
		}
	}
}
