package dogpile

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/perclient"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/roundtrip"
)

// A Cache's GETs (a Fetch's first look, Get) share round trips when many
// are in progress on its client, as the lock's scripts do (see package
// roundtrip): up to roundtrip.Direct at once (twice the processors), each
// is a GET of its own; beyond that, a GET waits for the next pipeline of
// the server its key lives on. Concurrent hits of many keys are what a
// busy service's cache does, and most of a GET's cost is its system calls,
// which a pipeline shares (bench/README.md, "Cache hits" and "Where the
// time goes"). A lone caller pays nothing for this: its GET goes straight
// out.
//
// Each GET in a pipeline is a GET of its own key, with its own reply: a
// key of another type answers WRONGTYPE to its caller alone (a miss, see
// notString). A caller whose ctx ends while its GET waits in the queue
// leaves at once, and the GET is not sent. The client's hooks see such
// GETs in a pipeline, on a context with the values of the batch's first
// caller (not its cancellation), as the lock's batched scripts are (see
// lock's package doc).

// A getCall is one GET, and once answered its reply.
type getCall struct {
	client redis.UniversalClient
	key    string
	b      []byte
	err    error
}

// getBatchers holds each client's batcher of GETs, shared by its Caches.
var getBatchers perclient.Map[*roundtrip.Batcher[getCall]]

// getBatcherFor returns client's batcher of GETs.
func getBatcherFor(client redis.UniversalClient) *roundtrip.Batcher[getCall] {
	return getBatchers.LoadOrNew(client, newGetBatcher)
}

func newGetBatcher() *roundtrip.Batcher[getCall] { return roundtrip.New(getAlone, getServer, sendGets) }

// getAlone sends g's GET on its own.
func getAlone(ctx context.Context, g getCall) getCall {
	g.b, g.err = g.client.Get(ctx, g.key).Bytes()
	return g
}

// getServer names g's lane: the server its key lives on.
func getServer(ctx context.Context, g getCall) string {
	return roundtrip.ServerOf(ctx, g.client, g.key)
}

// sendGets sends q's GETs in one pipeline.
func sendGets(ctx context.Context, q []*getCall, _ []context.Context) {
	cmds := make([]*redis.StringCmd, len(q))
	_ = redisutil.Pipelined(ctx, q[0].client, func(p redis.Pipeliner) {
		for i, g := range q {
			cmds[i] = p.Get(ctx, g.key)
		}
	})
	for i, g := range q {
		g.b, g.err = cmds[i].Bytes()
	}
}

// notString turns the reply of a GET of a value key that holds another
// type than a string (a list, a hash: something else wrote it under the
// prefix) into bytes that do not decode: a miss, like any foreign value,
// counted in Stats.DecodeErrors and overwritten by the compute's store (a
// SET, which replaces any type), not an error on every call. The scripts
// read such a key as none (see lookLua).
func notString(b []byte, err error) ([]byte, error) {
	if err != nil && err != redis.Nil && redis.HasErrorPrefix(err, "WRONGTYPE") {
		return []byte{}, nil
	}
	return b, err
}
