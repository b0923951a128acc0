package breaker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// The breaker hears of every dial of its client's connection pools, for
// two reasons:
//
//   - An outage shows first as a dial that fails: an established
//     connection to a dead server breaks, go-redis dials a new one, and the
//     dial is refused. Reporting it makes the breaker check the servers at
//     once, before go-redis's dial retries (about 1.7 s by default),
//     whatever the caller's deadline.
//   - go-redis counts the dials that fail; once a pool has failed PoolSize
//     of them it refuses to dial until its own probe, once a second,
//     connects, so callers would see Redis back up to a second after the
//     breaker did. A dial that fails is answered with a connection whose
//     first read or write fails with the dial's own error: go-redis then
//     counts no failed dial, and gives the command the error it would have
//     given (a dial error, which it retries as a command's).
//
// That is the one way the breaker changes the program's own commands on
// the client: a failed dial is not retried as a dial, only as a command
// (MaxRetries). They never fail with ErrUnavailable: only the library's
// calls ask the circuit.

// hook is the redis.Hook of a Breaker: a dial hook only.
type hook struct{ b *Breaker }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if !dialFailed(ctx, err) {
			return conn, err
		}
		h.b.suspect(&downError{addr + ": " + dialCause(err)}, 0)
		return deadConn{dialError{err}}, nil
	}
}

// dialFailed reports whether err, a dial's, says the server cannot be
// reached: refused, reset, or a timeout (DialTimeout) while the caller
// still waited. Go reports a dial timeout as context.DeadlineExceeded,
// which Unreachable leaves to the caller; a dial that the caller's own
// context ended says nothing of the server.
func dialFailed(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ne net.Error
	return Unreachable(err) || errors.As(err, &ne) && ne.Timeout()
}

// hookInto installs b's hook on client's connection pools: the client's own,
// or each node's of a Cluster or a Ring, present and future.
func hookInto(client redis.UniversalClient, b *Breaker) {
	h := hook{b}
	switch c := client.(type) {
	case *redis.Client:
		c.AddHook(h)
	case *redis.ClusterClient:
		// Nodes are made at the first call: a Cache or lock made before it
		// (the usual order) hooks every node. Nodes made earlier are not
		// hooked without I/O; their calls still go through the circuit.
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	case *redis.Ring:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
		_ = c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error {
			n.AddHook(h)
			return nil
		})
	}
}

// describe names client's servers in the outage log.
func describe(client redis.UniversalClient) string {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return fmt.Sprint("cluster ", c.Options().Addrs)
	case *redis.Ring:
		return fmt.Sprint("ring ", c.Options().Addrs)
	}
	return fmt.Sprintf("%T", client)
}

// A dialError is a failed dial's error, as a deadConn's reads and writes
// give it: go-redis strips one wrapping off the error of a connection's
// first command (its handshake), and the dial's own error (a
// *net.OpError, which go-redis retries and redisutil.NeverSent knows)
// must be what is left.
type dialError struct{ err error }

func (e dialError) Error() string { return e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// A deadConn is the connection the hook hands go-redis for a dial that
// failed: every read and write fails with the dial's error.
type deadConn struct{ err error }

func (c deadConn) Read([]byte) (int, error)         { return 0, c.err }
func (c deadConn) Write([]byte) (int, error)        { return 0, c.err }
func (c deadConn) Close() error                     { return nil }
func (c deadConn) LocalAddr() net.Addr              { return deadAddr{} }
func (c deadConn) RemoteAddr() net.Addr             { return deadAddr{} }
func (c deadConn) SetDeadline(time.Time) error      { return nil }
func (c deadConn) SetReadDeadline(time.Time) error  { return nil }
func (c deadConn) SetWriteDeadline(time.Time) error { return nil }

type deadAddr struct{}

func (deadAddr) Network() string { return "dogpile" }
func (deadAddr) String() string  { return "redis unavailable" }
