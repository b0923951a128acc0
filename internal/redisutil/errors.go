package redisutil

import (
	"errors"
	"net"
)

// NeverSent reports whether err proves a request never reached Redis (the
// connection could not even be made), so there is nothing to undo.
func NeverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ErrNotSent marks the error of a request that was never sent: its caller
// left while it waited in a queue (lock's batches).
var ErrNotSent = errors.New("request not sent")

// ErrUnavailable is the error of a call that skipped Redis, or whose dial
// was answered at once, because Redis is known to be unreachable (see
// internal/breaker): it sent nothing.
var ErrUnavailable = errors.New("redis unavailable")

// MayHaveRun reports whether a request that failed with err may have run
// in Redis all the same, its reply lost (a timeout, a cancelled context, a
// broken connection), so that what it may have done must be undone: the
// one test of the cache's and every lock's rollbacks. Not when the request
// provably never left (the dial failed, ErrNotSent, ErrUnavailable).
func MayHaveRun(err error) bool {
	return err != nil && !NeverSent(err) && !errors.Is(err, ErrNotSent) && !errors.Is(err, ErrUnavailable)
}
