package redistest

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"
)

// A Hook is a redis.Hook made of functions, for tests that count commands
// or inject faults: each set function wraps the call and decides whether
// and when to call next; a nil one passes the call through. Before, if
// set, sees the commands of every call, alone or in a pipeline, before the
// rest of the hook.
type Hook struct {
	Dial     func(ctx context.Context, network, addr string, next redis.DialHook) (net.Conn, error)
	Process  func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error
	Pipeline func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error
	Before   func(cmds ...redis.Cmder)
}

func (h Hook) DialHook(next redis.DialHook) redis.DialHook {
	if h.Dial == nil {
		return next
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return h.Dial(ctx, network, addr, next)
	}
}

func (h Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	if h.Process == nil && h.Before == nil {
		return next
	}
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.Before != nil {
			h.Before(cmd)
		}
		if h.Process == nil {
			return next(ctx, cmd)
		}
		return h.Process(ctx, cmd, next)
	}
}

func (h Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	if h.Pipeline == nil && h.Before == nil {
		return next
	}
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.Before != nil {
			h.Before(cmds...)
		}
		if h.Pipeline == nil {
			return next(ctx, cmds)
		}
		return h.Pipeline(ctx, cmds, next)
	}
}

// IsHandshake reports a command go-redis sends by itself when it opens a
// pooled connection (HELLO, CLIENT SETINFO, and the AUTH and SELECT of a
// client with a password or a database), not one the code under test sent.
func IsHandshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}
