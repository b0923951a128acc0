package benchmarks

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// countCommands adds a hook to rdb that adds to n every command it sends,
// including each command of a pipeline. Pub/sub traffic does not pass
// through hooks; it is not counted.
func countCommands(rdb *redis.Client, n *atomic.Int64) {
	rdb.AddHook(&counter{n})
}

type counter struct{ n *atomic.Int64 }

func (*counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// serverCPU returns the CPU time (user+system) the redis-server process
// has used so far, from INFO cpu. Its delta over a benchmark divided by b.N
// is the server's cost of one operation, which a local benchmark on a
// shared machine otherwise hides in the client's wall time. The INFO call
// itself is not counted by the caller's command counter.
func serverCPU(tb testing.TB, addr string) time.Duration {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			tb.Fatalf("INFO cpu: %s: %v", line, err)
		}
		total += time.Duration(s * float64(time.Second))
	}
	return total
}
