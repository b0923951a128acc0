package dogpile_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// nodeCounter counts, per node, the pipelines and single commands that
// node's client sends.
type nodeCounter struct {
	mu        sync.Mutex
	pipelines map[string]int
	commands  map[string]int // commands in pipelines and alone
	singles   map[string]int
}

func newNodeCounter() *nodeCounter {
	return &nodeCounter{pipelines: map[string]int{}, commands: map[string]int{}, singles: map[string]int{}}
}

func (n *nodeCounter) reset() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.pipelines)
	clear(n.commands)
	clear(n.singles)
}

// hook returns the hook of the node client for addr.
func (n *nodeCounter) hook(addr string) redis.Hook {
	return redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if !redistest.IsHandshake(cmd) && cmd.Name() != "cluster" { // CLUSTER SLOTS: the client's topology refresh
				n.mu.Lock()
				n.singles[addr]++
				n.commands[addr]++
				n.mu.Unlock()
			}
			return next(ctx, cmd)
		},
		Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			sent := 0
			for _, c := range cmds {
				if !redistest.IsHandshake(c) {
					sent++
				}
			}
			if sent > 0 { // not the handshake of a new connection
				n.mu.Lock()
				n.pipelines[addr]++
				n.commands[addr] += sent
				n.mu.Unlock()
			}
			return next(ctx, cmds)
		},
	}
}

// TestFetchManyOnePipelinePerNode: on a 3-master cluster, a FetchMany of
// 100 keys that all hit sends one pipeline to each node, of one MGET per
// hash slot, and nothing else; on a single server, one MGET.
func TestFetchManyOnePipelinePerNode(t *testing.T) {
	ctx := t.Context()
	cl := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	count := newNodeCounter()
	cc.OnNewNode(func(rdb *redis.Client) { rdb.AddHook(count.hook(rdb.Options().Addr)) })

	c := dogpile.New[string](cc, prefix(t))
	keys := keyRange("k", 100)
	slots := map[int]bool{}
	for _, k := range keys {
		require.NoError(t, c.Set(ctx, k, "v:"+k, time.Minute))
		slots[redisutil.Slot(dogpile.KeysOf(c, k).Value)] = true
	}
	count.reset()
	got, err := c.FetchMany(ctx, keys, time.Minute, redistest.NoComputeMany[string])
	require.NoError(t, err)
	wantAll(t, got, keys)
	count.mu.Lock()
	defer count.mu.Unlock()
	if len(count.pipelines) != 3 {
		t.Errorf("pipelines per node = %v; want one to each of the 3 masters", count.pipelines)
	}
	total := 0
	for addr, n := range count.pipelines {
		if n != 1 {
			t.Errorf("node %s got %d pipelines; want 1", addr, n)
		}
		total += count.commands[addr]
	}
	if len(count.singles) != 0 || total != len(slots) {
		t.Errorf("commands = %d in pipelines (+ %v alone); want %d, an MGET per slot", total, count.singles, len(slots))
	}

	// A single server: one MGET.
	rdb := redistest.StartServer(t).Client(t)
	hc := redistest.RecordCommands(rdb)
	s := dogpile.New[string](rdb, prefix(t))
	for _, k := range keys {
		require.NoError(t, s.Set(ctx, k, "v:"+k, time.Minute))
	}
	hc.Take()
	if got, err = s.FetchMany(ctx, keys, time.Minute, redistest.NoComputeMany[string]); err != nil {
		t.Fatal(err)
	}
	wantAll(t, got, keys)
	if cmds := hc.Take(); len(cmds) != 1 || cmds[0] != "mget" {
		t.Errorf("single server sent %v; want one mget", cmds)
	}
}

// TestFetchManyMissCommands: all misses on a single server cost three
// round trips: the MGET, one lock script for all, one pipeline of stores.
func TestFetchManyMissCommands(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	dogpile.LoadScripts(t, rdb)
	hc := redistest.RecordCommands(rdb)
	c := dogpile.New[string](rdb, prefix(t))
	keys := keyRange("k", 20)
	got, err := c.FetchMany(t.Context(), keys, time.Minute, (&echo{}).compute)
	require.NoError(t, err)
	wantAll(t, got, keys)
	cmds := hc.Take()
	evals := 0
	for _, name := range cmds {
		if name == "evalsha" {
			evals++
		}
	}
	if len(cmds) != 2+len(keys) || cmds[0] != "mget" || evals != 1+len(keys) {
		t.Errorf("commands %v; want mget, one lock script, %d stores", cmds, len(keys))
	}
}
