package redisutil

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Pipelined runs fill's commands in one pipeline on c, as c.Pipelined
// does, and returns its error. A hook that refuses the pipeline (returns
// an error without running it: a rate limiter, a fault injector) leaves
// its commands with neither a reply nor an error, which callers read as
// an empty value, nothing stored or success: each is then given the
// pipeline's error, as a command refused alone is. A pipeline that ran is
// left as it is: each command has its own reply or error. Every pipeline
// of the library goes through here.
func Pipelined(ctx context.Context, c redis.Cmdable, fill func(redis.Pipeliner)) error {
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		fill(p)
		return nil
	})
	if err == nil {
		return nil
	}
	for _, cmd := range cmds {
		if cmd.Err() != nil {
			return err
		}
	}
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
	return err
}
