package redisutil

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Every Lua script of the library reaches Redis one way. A script is sent
// by its SHA (EVALSHA) first, never with its body: a server that has it,
// the usual case, answers at once, and a process, Cache or Mutex made anew
// costs no more. A server that lacks it (a new or restarted server, a
// failover, SCRIPT FLUSH, a cluster node that never ran it) answers
// NOSCRIPT and ran nothing, so the call is sent again with the body
// (EVAL), which loads the script as it runs it: one more round trip, the
// first time only. A call alone is [Call.Run] (go-redis's Script.Run); the
// calls of a pipeline are [RunScripts] or [ScriptPipeline.Run], whose calls
// answered NOSCRIPT all go again together, in one more pipeline, so that a
// pipeline on a cold server costs two round trips, not one per call.

// A Call is one run of a Lua script: the script, and the KEYS and ARGV it
// is given.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// Run runs the call alone on c: EVALSHA, and EVAL if the server answers
// NOSCRIPT.
func (sc Call) Run(ctx context.Context, c redis.Scripter) *redis.Cmd {
	return sc.Script.Run(ctx, c, sc.Keys, sc.Args...)
}

// RunScripts runs calls in one pipeline on c (see Pipelined) and returns
// their replies, in order, each with its own error. Calls answered
// NOSCRIPT are sent again, as EVAL, in one more pipeline.
func RunScripts(ctx context.Context, c redis.Cmdable, calls []Call) []*redis.Cmd {
	return ScriptPipeline{Calls: calls}.Run(ctx, c)
}

// A ScriptPipeline is calls sent in one pipeline, with what RunScripts
// cannot say: commands that must follow them, and calls not to send again.
type ScriptPipeline struct {
	Calls []Call
	// Then, if not nil, adds commands after the calls in each pipeline
	// sent, the second one too: a WAIT, which counts the replicas that
	// have the writes made before it on its connection.
	Then func(redis.Pipeliner)
	// Left, if not nil, reports whether the caller of Calls[i] has left:
	// its call, answered NOSCRIPT, is not sent again (its reply keeps the
	// NOSCRIPT error), since nobody would read or undo what it did.
	Left func(i int) bool
}

// Run runs p's calls in one pipeline on c and returns their replies, in
// order, each with its own error. Calls answered NOSCRIPT, but those
// whose caller left, are sent again, as EVAL, in one more pipeline, with
// Then's commands after them again.
func (p ScriptPipeline) Run(ctx context.Context, c redis.Cmdable) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(p.Calls))
	_ = Pipelined(ctx, c, func(pipe redis.Pipeliner) {
		for i, sc := range p.Calls {
			cmds[i] = sc.Script.EvalSha(ctx, pipe, sc.Keys, sc.Args...)
		}
		if p.Then != nil {
			p.Then(pipe)
		}
	})
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") && (p.Left == nil || !p.Left(i)) {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds
	}
	_ = Pipelined(ctx, c, func(pipe redis.Pipeliner) {
		for _, i := range again {
			sc := p.Calls[i]
			cmds[i] = sc.Script.Eval(ctx, pipe, sc.Keys, sc.Args...)
		}
		if p.Then != nil {
			p.Then(pipe)
		}
	})
	return cmds
}

// FirstErr is the first error of cmds other than redis.Nil, if any.
func FirstErr(cmds []*redis.Cmd) error {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
}
