package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// ErrReplication is returned, with [ErrNotObtained], by an acquire that
// took the lock but could not confirm that enough replicas have it (see
// [WithReplicaAck]); the lock was given back.
var ErrReplication = errors.New("lock: not acknowledged by enough replicas")

// WithReplicaAck makes every acquire, and every extension, of the lock
// wait until n replicas of the master that holds it have its writes, the
// lock and its fence (Redis's WAIT n timeout). An acquire that n replicas
// do not acknowledge within timeout is rolled back and fails at once with
// an error matching [ErrNotObtained] and [ErrReplication], for the caller
// to retry or give up; an unacknowledged extension counts as a failed one.
// A lease so acquired survives a failover to one of those replicas; a
// release is not waited for, so a failover may bring a released lock back
// until its TTL. timeout must be shorter than the client's ReadTimeout. A
// Redlock ignores the option (its servers have no replicas). WithReplicaAck
// panics unless n > 0 and timeout > 0.
func WithReplicaAck(n int, timeout time.Duration) Option {
	if n < 1 || timeout <= 0 {
		panic(fmt.Sprintf("lock: replica ack of %d within %v (a programmer error)", n, timeout))
	}
	return optionFunc(func(o *options) { o.acks, o.ackTimeout = n, timeout })
}

// script runs s on client as s.Run does. With WithReplicaAck it also
// reports whether enough replicas acknowledged its writes; without, acked
// is true.
//
// The WAIT goes in one pipeline with the script, on the connection of the
// master that holds keys[0] (WAIT counts the replicas of its own
// connection's server and the writes made on it), so the option costs each
// acquire and extension a round trip no shorter than the slowest of the n
// replicas, and a Mutex's acquire goes to Redis on its own, not in a shared
// batch (see batch.go). bench/README.md ("Mutex with WithReplicaAck")
// measures the cost against the plain mutex.
func (o *options) script(ctx context.Context, client redis.UniversalClient, s *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, acked bool) {
	call := redisutil.Call{Script: s, Keys: keys, Args: args}
	if o.acks == 0 {
		return call.Run(ctx, client), true
	}
	node, err := nodeOf(ctx, client, keys[0])
	if err != nil {
		cmd = redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd, false
	}
	var wait *redis.Cmd // the last pipeline's, after the script's EVAL if it went again
	cmd = redisutil.ScriptPipeline{Calls: []redisutil.Call{call}, Then: func(p redis.Pipeliner) {
		wait = p.Do(ctx, "WAIT", o.acks, o.ackTimeout.Milliseconds())
	}}.Run(ctx, node)[0]
	n, werr := wait.Int64()
	return cmd, werr == nil && n >= int64(o.acks)
}

// replicationErr is the error of an acquire that took the lock without
// the acknowledgements WithReplicaAck asks for.
func (o *options) replicationErr() error {
	return fmt.Errorf("%w: %w", ErrNotObtained, inner{o.unackedErr()})
}

// unackedErr says that writes went without the acknowledgements
// WithReplicaAck asks for.
func (o *options) unackedErr() error {
	return fmt.Errorf("%w (%d replicas within %v)", ErrReplication, o.acks, o.ackTimeout)
}

// nodeOf is the client of the master (or the shard) that holds key: WAIT
// counts the replicas of the connection's own server.
func nodeOf(ctx context.Context, client redis.UniversalClient, key string) (redis.UniversalClient, error) {
	switch n, err := redisutil.NodeOf(ctx, client, key); {
	case err != nil:
		return nil, err
	case n != nil:
		return n, nil
	}
	return client, nil
}

// unacked fails r, a granted reply, when its writes were not acknowledged.
func (o *options) unacked(r reply, acked bool) reply {
	if r.granted && !acked {
		r.granted, r.err = false, o.replicationErr()
	}
	return r
}

// extended reads an extension script's reply, held when it extended
// something (n > 0); one whose writes were not acknowledged counts as a
// failed extension, retried until the lease's safe deadline.
func (o *options) extended(cmd *redis.Cmd, acked bool) (bool, error) {
	n, err := cmd.Int64()
	if err == nil && n > 0 && !acked {
		return false, o.unackedErr()
	}
	return n > 0, err
}
