package benchmarks

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// traffic counts what a client sends: commands, and connections dialed.
type traffic struct {
	cmds  atomic.Int64 // commands, not counting connection handshakes
	dials atomic.Int64 // new connections, pool and pub/sub alike
}

// countCommands adds a hook to rdb that counts into t. The handshake of a
// new connection (HELLO, CLIENT SETINFO, CLIENT MAINT_NOTIFICATIONS, which
// go-redis sends through the hooks too) is counted as one dial instead.
// Commands sent on a pub/sub connection (SUBSCRIBE) do not pass through
// hooks, but its dial does.
func countCommands(rdb *redis.Client, t *traffic) {
	rdb.AddHook(redistest.Hook{
		Dial: func(ctx context.Context, network, addr string, next redis.DialHook) (net.Conn, error) {
			t.dials.Add(1)
			return next(ctx, network, addr)
		},
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			t.count(cmd)
			return next(ctx, cmd)
		},
		Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
			t.count(cmds...)
			return next(ctx, cmds)
		},
	})
}

// count counts the commands that are not part of go-redis's connection
// setup (see redistest.IsHandshake).
func (t *traffic) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if !redistest.IsHandshake(cmd) {
			t.cmds.Add(1)
		}
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

// serverCalls returns how many commands the redis-server has executed so
// far, from INFO commandstats, commands that scripts call included. Its
// delta over a benchmark divided by b.N is the work one operation costs
// the server, beside its CPU time. The INFO call itself counts one.
func serverCalls(tb testing.TB, addr string) int64 {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	var total int64
	for line := range strings.Lines(info) {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			tb.Fatalf("INFO commandstats: %s: %v", line, err)
		}
		total += n
	}
	return total
}
