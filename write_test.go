package dogpile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestRefusedPipelines: a pipeline that a client's hook refuses without
// running it (a rate limiter, a fault injector) fails each of its commands
// with the hook's error, as a command refused alone fails, wherever the
// library pipelines: FetchMany's read, SetTagged's scripts, the GET and
// PTTL of a WithStale Cache's first hits. Not an empty reply, read as
// nothing stored, as a value that does not decode, or as success.
func TestRefusedPipelines(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := t.Context()
	plain := dogpile.New[string](rdb, prefix(t))
	stale := dogpile.New[string](rdb, dogpile.WithPrefix(t.Name()+":stale:"), dogpile.WithStale(time.Minute))
	for _, c := range []*dogpile.Cache[string]{plain, stale} {
		require.NoError(t, c.Set(ctx, "k", "v", time.Minute))
	}
	refused := errors.New("refused by a hook")
	rdb.AddHook(redistest.Hook{Pipeline: func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		return refused
	}})
	never := func(context.Context) (string, error) { return "", errors.New("computed: the value was cached") }
	if got, err := plain.FetchMany(ctx, []string{"k", "other"}, time.Minute, func(context.Context, []string) (map[string]string, error) {
		return nil, errors.New("computed: FetchMany's read was refused")
	}); !errors.Is(err, refused) {
		t.Errorf("FetchMany through a refused pipeline = %v, %v; want the hook's error", got, err)
	}
	if err := plain.SetTagged(ctx, "t", "v", time.Minute, "a", "b"); !errors.Is(err, refused) {
		t.Errorf("SetTagged through a refused pipeline = %v; want the hook's error", err)
	}
	if v, err := stale.Fetch(ctx, "k", time.Minute, never); !errors.Is(err, refused) || stale.Stats().DecodeErrors != 0 {
		t.Errorf("Fetch (WithStale, GET and PTTL pipelined) through a refused pipeline = %q, %v, %d decode errors; want the hook's error, none",
			v, err, stale.Stats().DecodeErrors)
	}
}
