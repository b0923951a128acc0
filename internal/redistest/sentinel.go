package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name under which a [Sentinel] monitors its master.
const SentinelMaster = "dogpile"

// sentinelTimeout bounds how long the replica may take to sync and the
// sentinel to learn about both.
const sentinelTimeout = 30 * time.Second

// A Sentinel is a real Redis Sentinel deployment: a master, a replica of
// it, and one redis-server in --sentinel mode monitoring them (quorum 1).
// Clients find the master through the sentinel, as with
// [redis.NewFailoverClient]. Each process is a [Server], so a test can kill,
// pause or restart it.
//
// A Sentinel is safe for concurrent use. The zero value is not usable;
// create one with [StartSentinel].
type Sentinel struct {
	Master, Replica, Sentinel *Server
}

// StartSentinel starts a master, a replica and a sentinel, and waits until
// the replica is in sync and the sentinel names the master and knows the
// replica. tb.Cleanup kills all three. It skips or fails like
// [StartServer] when REDIS_ADDR is set or redis-server is missing.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	// No 5 s wait for more replicas before the first full sync.
	s := &Sentinel{Master: StartServer(tb, "--repl-diskless-sync-delay", "0")}
	s.Replica = StartServer(tb, "--replicaof", "127.0.0.1", port(s.Master))
	s.Sentinel = newServer(tb, false, []string{
		"--sentinel", "monitor", SentinelMaster, "127.0.0.1", port(s.Master), "1",
		"--sentinel", "down-after-milliseconds", SentinelMaster, "5000",
		// Known from the start: otherwise the sentinel learns of the
		// replica only from the master's INFO, polled every 10 s.
		"--sentinel", "known-replica", SentinelMaster, "127.0.0.1", port(s.Replica),
	})
	s.Sentinel.sentinel = true
	if err := s.Sentinel.start(); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), sentinelTimeout)
	defer cancel()
	if err := s.settle(ctx); err != nil {
		tb.Fatalf("redistest: start a sentinel deployment: %v", err)
	}
	return s
}

// Client returns a new failover client that asks the sentinel for the
// master; tb.Cleanup closes it.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    SentinelMaster,
		SentinelAddrs: []string{s.Sentinel.Addr()},
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// settle waits until the replica reports its link to the master up and the
// sentinel reports the master's address and one replica.
func (s *Sentinel) settle(ctx context.Context) error {
	replica := redis.NewClient(&redis.Options{Addr: s.Replica.Addr()})
	defer replica.Close()
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr()})
	defer sentinel.Close()
	return poll(ctx, clusterStep, func() error { return s.settled(ctx, replica, sentinel) })
}

func (s *Sentinel) settled(ctx context.Context, replica *redis.Client, sentinel *redis.SentinelClient) error {
	info, err := replica.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("replica: INFO: %w", err)
	}
	if !strings.Contains(info, "master_link_status:up") {
		return fmt.Errorf("replica %s not in sync with master %s", s.Replica.Addr(), s.Master.Addr())
	}
	addr, err := sentinel.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return fmt.Errorf("sentinel: get-master-addr-by-name: %w", err)
	}
	if want := s.Master.Addr(); len(addr) != 2 || addr[0]+":"+addr[1] != want {
		return fmt.Errorf("sentinel names master %v, want %s", addr, want)
	}
	replicas, err := sentinel.Replicas(ctx, SentinelMaster).Result()
	if err != nil {
		return fmt.Errorf("sentinel: replicas: %w", err)
	}
	if len(replicas) != 1 {
		return fmt.Errorf("sentinel knows %d replicas, want 1", len(replicas))
	}
	return nil
}

// port returns s's port as a string, for server arguments.
func port(s *Server) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.Itoa(s.port)
}
