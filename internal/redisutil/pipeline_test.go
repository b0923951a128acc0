package redisutil

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestPipelinedErrors: each command of a pipeline ends with the error that
// is its own. A pipeline a hook refused gives every command the hook's
// error; one that ran keeps each command's own reply or error, a
// WRONGTYPE reaching its command alone.
func TestPipelinedErrors(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := t.Context()
	refused := errors.New("refused by a hook")
	for _, tc := range []struct {
		name string
		hook func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error
		want []error // per command: GET of a string, GET of a list, GET of a missing key
	}{
		{"refused", func(context.Context, []redis.Cmder, redis.ProcessPipelineHook) error { return refused },
			[]error{refused, refused, refused}},
		{"ran", nil, []error{nil, errWrongType, redis.Nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer rdb.Close()
			if err := rdb.Set(ctx, "s", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.RPush(ctx, "l", "x").Err(); err != nil {
				t.Fatal(err)
			}
			rdb.AddHook(redistest.Hook{Pipeline: tc.hook})
			var cmds []*redis.StringCmd
			_ = Pipelined(ctx, rdb, func(p redis.Pipeliner) {
				for _, k := range []string{"s", "l", "missing"} {
					cmds = append(cmds, p.Get(ctx, k))
				}
			})
			for i, cmd := range cmds {
				got, want := cmd.Err(), tc.want[i]
				if want == errWrongType {
					if !redis.HasErrorPrefix(got, "WRONGTYPE") {
						t.Errorf("command %d: %v, want WRONGTYPE", i, got)
					}
					continue
				}
				if !errors.Is(got, want) && got != want {
					t.Errorf("command %d: %v, want %v", i, got, want)
				}
			}
		})
	}
}

// errWrongType stands for the server's WRONGTYPE reply in want.
var errWrongType = errors.New("WRONGTYPE")
