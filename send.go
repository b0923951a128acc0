package dogpile

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/script"
)

// How calls reach Redis: through the client's circuit breaker (guard),
// lock attempts by turns, scripts as redisutil sends them (EVALSHA, then
// EVAL on NOSCRIPT), and, for FetchMany, scripts sent together in one
// pipeline (go-redis splits a pipeline per node, so a cluster costs one
// round trip per node, sent in parallel), with keys grouped by what one
// script may touch together.

// A scriptCall is one script run; a pipeline of them is sent by
// redisutil.RunScripts.
type scriptCall = redisutil.Call

// maxGroup bounds the keys of one script call (and one MGET), so that a
// huge batch does not block the server in one long script.
const maxGroup = 256

// slotGroups splits the indexes of the value keys vks into groups whose
// keys one script (or one MGET) may touch together: all of them on a single
// server, one group per hash slot on a cluster, and one per key on a ring
// or any other client (a ring's shards place keys by their own hash). No
// group is longer than maxGroup.
func slotGroups(client redis.UniversalClient, vks []string) [][]int {
	var groups [][]int
	add := func(g int, i int) int {
		if g < 0 || len(groups[g]) == maxGroup {
			groups = append(groups, nil)
			g = len(groups) - 1
		}
		groups[g] = append(groups[g], i)
		return g
	}
	switch client.(type) {
	case *redis.Client:
		for i := 0; i < len(vks); i += maxGroup {
			g := make([]int, min(maxGroup, len(vks)-i))
			for n := range g {
				g[n] = i + n
			}
			groups = append(groups, g)
		}
	case *redis.ClusterClient:
		bySlot := map[int]int{}
		for i, k := range vks {
			s := redisutil.Slot(k)
			g, ok := bySlot[s]
			if !ok {
				g = -1
			}
			bySlot[s] = add(g, i)
		}
	default:
		for i := range vks {
			add(-1, i)
		}
	}
	return groups
}

// firstErr is the first error of cmds, if any.
func firstErr(cmds []*redis.Cmd) error {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			return err
		}
	}
	return nil
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// guard runs f, the first round trip of a call, through the client's
// circuit breaker (see ErrUnavailable): while Redis is known to be
// unreachable it returns ErrUnavailable without calling f.
func (c *core[T]) guard(ctx context.Context, f func() error) error {
	done, err := c.allow(ctx)
	if err != nil {
		return err
	}
	err = f()
	c.report(done, err)
	return err
}

// turnedAway returns the error of a call that would wait for a flight
// while the client's circuit is open: that flight needs Redis (unless it
// computes without it, WithComputeWhenDown), and it may hang on a server
// that stopped answering until its read times out, so the caller fails
// at once, as one that reads would.
func (c *core[T]) turnedAway() error {
	if c.opts.computeIfDown || !c.breaker.Open() {
		return nil
	}
	c.stats.unavailable.Add(1)
	return c.breaker.Err()
}

// unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works.
func unreachable(err error) bool { return breaker.Unreachable(err) }

// rollback undoes, in the background, requests of this process whose
// replies were lost (a lock attempt, a store) with undo, releases of the
// token they may have left holding a lock: the way the lock package undoes
// its lost acquires too (see redisutil.Rollback). ctx's end means that no
// caller waits any more.
func (c *core[T]) rollback(ctx context.Context, undo ...scriptCall) {
	redisutil.Rollback(ctx, func(ctx context.Context) { redisutil.RunScripts(ctx, c.client, undo) })
}

// release gives up the lock if it still holds token, and wakes waiters.
func (c *core[T]) release(ctx context.Context, ks keys, token string) {
	ctx, cancel := redisutil.Detached(ctx)
	defer cancel()
	_ = releaseCall(ks, token, c.publish).Run(ctx, c.client).Err()
}

// releaseCall is the script call of release.
func releaseCall(ks keys, token, publish string) scriptCall {
	return scriptCall{Script: script.Release, Keys: []string{ks.lock, ks.channel}, Args: []any{token, publish}}
}
