package lock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/perclient"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

// Calls that overlap share round trips (see package roundtrip): a plain
// mutex's acquire or release goes straight to Redis while few calls are in
// progress on its client, so an uncontended Lock pays nothing for this;
// with many goroutines locking (each its own name, say), a call joins a
// pipeline. A caller still returns by its context's deadline; a request it
// left in flight may still run, and the caller rolls it back as when a
// direct request times out (see rollback, and roundtrip.InFlight).

// A batcher runs the scripts of every mutex on one client.
type batcher = roundtrip.Batcher[scriptCall]

// A scriptCall is one script's run on a client, and once answered its
// reply.
type scriptCall struct {
	client redis.UniversalClient
	call   redisutil.Call
	cmd    *redis.Cmd
}

var batchers perclient.Map[*batcher]

// batcherFor returns client's batcher, shared by every mutex on it.
func batcherFor(client redis.UniversalClient) *batcher {
	return batchers.LoadOrNew(client, newBatcher)
}

func newBatcher() *batcher { return roundtrip.New(runAlone, serverOf, sendScripts) }

// runScript runs script on client, as Script.Run does, in a batch of
// client's batcher b when many calls are in progress (see package roundtrip).
func runScript(ctx context.Context, b *batcher, client redis.UniversalClient, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	c, err := b.Do(ctx, scriptCall{client: client, call: redisutil.Call{Script: script, Keys: keys, Args: args}})
	if err != nil {
		return failed(ctx, err)
	}
	return c.cmd
}

// runAlone runs c on its own.
func runAlone(ctx context.Context, c scriptCall) scriptCall {
	c.cmd = c.call.Run(ctx, c.client)
	return c
}

// serverOf names the lane of c: the server its first key lives on.
func serverOf(ctx context.Context, c scriptCall) string {
	return roundtrip.ServerOf(ctx, c.client, c.call.Keys[0])
}

// sendScripts runs q's calls in one pipeline, on their client (one
// batcher's calls share it). A script flushed from the server's cache (a
// restart, a failover, SCRIPT FLUSH) ran for no one: its calls go again,
// as EVAL, which loads it, in one more pipeline (see
// redisutil.ScriptPipeline); not those whose caller has gone.
func sendScripts(ctx context.Context, q []*scriptCall, ctxs []context.Context) {
	calls := make([]redisutil.Call, len(q))
	for i, c := range q {
		calls[i] = c.call
	}
	left := func(i int) bool { return ctxs[i].Err() != nil }
	for i, cmd := range (redisutil.ScriptPipeline{Calls: calls, Left: left}).Run(ctx, q[0].client) {
		q[i].cmd = cmd
	}
}

// failed returns a reply that carries err.
func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
