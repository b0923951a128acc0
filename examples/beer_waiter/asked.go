package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A fair mutex serves waiters in the order Redis queued them, which is not
// quite the order in which they called Lock: between the call and its
// script reaching Redis, a loaded machine can stall a waiter for tens of
// milliseconds, and a later arrival (in another goroutine or process) gets
// in line first. So a waiter's place in line is known only between two
// instants: when it called Lock (waiter.Arrive) and when the first reply of
// an acquire script came back (waiter.Asked): by then Redis had queued it,
// or granted it the tap. Only pairs whose intervals do not overlap are in a
// known order; the check of -fair counts only those.

// askedKey marks a Lock's context with the *atomic.Int64 that receives the
// first script reply's time (µs).
type askedKey struct{}

// withAsked returns ctx marked to record when its first script reply came,
// and a function that returns that time, 0 if none came.
func withAsked(ctx context.Context) (context.Context, func() int64) {
	at := new(atomic.Int64)
	return context.WithValue(ctx, askedKey{}, at), at.Load
}

// askedHook records, for a context marked by withAsked, when the first
// script call on it succeeded. Every command of the lock's first attempt is
// a script (EVALSHA, or EVAL after a NOSCRIPT error, which did nothing).
type askedHook struct{}

func (askedHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (askedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (askedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if at, ok := ctx.Value(askedKey{}).(*atomic.Int64); ok && err == nil && isScript(cmd.Name()) {
			at.CompareAndSwap(0, time.Now().UnixMicro())
		}
		return err
	}
}

func isScript(name string) bool { return name == "evalsha" || name == "eval" }
