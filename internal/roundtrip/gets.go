package roundtrip

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/perclient"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Gets sends the GETs of one client: up to a few at once (see defaultDirect), each is a GET of
// its own; beyond that, a GET waits for the next pipeline of the server its
// key lives on. Each GET in a pipeline is still its own command with its
// own reply. The cache's hits (package dogpile) read through it.
type Gets struct {
	b *Batcher[getCall] // holds no client: a client's Gets must not keep it alive
}

// A getCall is one GET, and once answered its reply.
type getCall struct {
	client redis.UniversalClient
	key    string
	b      []byte
	err    error
}

// gets holds each client's Gets, shared by every Cache on it.
var gets perclient.Map[*Gets]

// GetsOf returns client's Gets.
func GetsOf(client redis.UniversalClient) *Gets {
	return gets.LoadOrNew(client, func() *Gets {
		return &Gets{b: New(getAlone, getServer, sendGets)}
	})
}

// Get returns the value of key, as client.Get(ctx, key).Bytes would; client
// is the one g was made for.
func (g *Gets) Get(ctx context.Context, client redis.UniversalClient, key string) ([]byte, error) {
	r, err := g.b.Do(ctx, getCall{client: client, key: key})
	if err != nil {
		return nil, err
	}
	return r.b, r.err
}

// SetDirect makes up to n GETs in progress go straight to Redis (for tests:
// 0 makes every GET queue for a pipeline).
func (g *Gets) SetDirect(n int32) { g.b.SetDirect(n) }

// Queued returns how many GETs wait in server's lane, and whether it has
// one (for tests).
func (g *Gets) Queued(server string) (int, bool) { return g.b.Queued(server) }

// getAlone sends g's GET on its own.
func getAlone(ctx context.Context, g getCall) getCall {
	g.b, g.err = g.client.Get(ctx, g.key).Bytes()
	return g
}

// getServer names g's lane: the server its key lives on.
func getServer(ctx context.Context, g getCall) string {
	return ServerOf(ctx, g.client, g.key)
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
