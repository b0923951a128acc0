package breaker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// How the breaker asks the servers whether they answer (see the package
// doc): a PING on a connection of its own to each server the client's
// calls go to, outside the client's pool, retries and hooks. The pool may
// be exhausted by a busy program, and a call's timeout says nothing of
// which it was; a connection of the check's own is answered at once by a
// working server, however busy the client, and never by a frozen one.

const (
	// maxCheckWait is how long a server has to answer the check's PING,
	// once connected (and, apart, to connect): what a working Redis never
	// takes, short enough that callers with deadlines of a tenth of a
	// second see a frozen server within a second. A client whose
	// ReadTimeout is shorter says that a working Redis never takes that
	// long, and is taken at its word (down to minCheckWait).
	maxCheckWait = 500 * time.Millisecond
	minCheckWait = 20 * time.Millisecond

	// lateGrace is how long a check whose PING seemed to go unanswered
	// still looks for the reply: a checker that the scheduler ran late may
	// find its deadline passed with the reply already there.
	lateGrace = 20 * time.Millisecond

	// checkEvery bounds how often timeouts start a check: a busy client
	// whose callers time out all the time costs at most one PING per
	// server per checkEvery.
	checkEvery = cooldown
)

// pingCmd is PING in RESP. Any reply (PONG, or an error such as NOAUTH
// or LOADING) shows the server answers; no handshake is needed for that.
var pingCmd = []byte("*1\r\n$4\r\nPING\r\n")

// suspect starts a check of the servers, unless one runs or one started
// less than every ago: a call failed with err, which suggests they may be
// down. A server found down opens the circuit. It never blocks the
// caller. A breaker without servers to ask (New(nil)) takes err's word.
func (b *Breaker) suspect(err error, every time.Duration) {
	if b.check == nil {
		if Unreachable(err) {
			b.Fail(err)
		}
		return
	}
	if b.checking.Load() || !b.closed.Load() {
		return
	}
	now := time.Now().UnixNano()
	if now-b.lastCheck.Load() < int64(every) || !b.checking.CompareAndSwap(false, true) {
		return
	}
	b.lastCheck.Store(now)
	go func() {
		defer b.checking.Store(false)
		if err := b.check(context.Background()); err != nil {
			b.Fail(err)
		}
	}()
}

// probe asks the servers on behalf of an open circuit's probe, a call
// that waits for the answer within ctx: nil if every server answered (the
// circuit is closed then). The check goes on if ctx ends first, and its
// outcome still closes or opens the circuit.
func (b *Breaker) probe(ctx context.Context, report func(error)) error {
	res := make(chan error, 1)
	go func() {
		err := b.check(context.Background())
		b.settle(report, err)
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return b.unavailable()
		}
		return nil
	case <-ctx.Done():
		return b.unavailable()
	}
}

// checker returns the check of client's servers: its own server, a
// Cluster's masters, a Ring's live shards; for a client of another type,
// a PING through the client. It holds client weakly (a Breaker must not
// keep its client alive); a client gone has nothing to check.
func checker(client redis.UniversalClient) func(context.Context) error {
	switch c := client.(type) {
	case *redis.Client:
		w := weak.Make(c)
		return func(ctx context.Context) error {
			if c := w.Value(); c != nil {
				return checkServers(ctx, []*redis.Options{c.Options()})
			}
			return nil
		}
	case *redis.ClusterClient:
		w := weak.Make(c)
		return func(ctx context.Context) error {
			if c := w.Value(); c != nil {
				return checkCluster(ctx, c)
			}
			return nil
		}
	case *redis.Ring:
		w := weak.Make(c)
		return func(ctx context.Context) error {
			if c := w.Value(); c != nil {
				return checkServers(ctx, nodesOf(c.ForEachShard, ctx))
			}
			return nil
		}
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, maxCheckWait)
		defer cancel()
		if err := client.Ping(ctx).Err(); Unreachable(err) || timedOut(err) {
			return &downError{fmt.Sprintf("%s: %v", describe(client), err)}
		}
		return nil
	}
}

// checkCluster checks c's masters. It asks those of the slot map go-redis
// has; if one does not answer, it reloads the map (within the check's
// wait) and asks the masters of the new one, if they differ: a master
// that died and whose replica took over is in the old map, not the new.
func checkCluster(ctx context.Context, c *redis.ClusterClient) error {
	// ForEachMaster reloads the map first, with I/O that a frozen node
	// would hold up, unless its context is done: it then uses the map it
	// has.
	done, cancel := context.WithCancel(ctx)
	cancel()
	masters := nodesOf(c.ForEachMaster, done)
	err := checkServers(ctx, masters)
	if err == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, maxCheckWait)
	defer cancel()
	fresh := nodesOf(c.ForEachMaster, rctx)
	if sameAddrs(masters, fresh) {
		return err
	}
	return checkServers(ctx, fresh)
}

// sameAddrs reports whether a and b name the same servers.
func sameAddrs(a, b []*redis.Options) bool {
	if len(a) != len(b) {
		return false
	}
	in := make(map[string]bool, len(a))
	for _, o := range a {
		in[o.Addr] = true
	}
	for _, o := range b {
		if !in[o.Addr] {
			return false
		}
	}
	return true
}

// nodesOf returns the options of the nodes forEach visits.
func nodesOf(forEach func(context.Context, func(context.Context, *redis.Client) error) error, ctx context.Context) []*redis.Options {
	var mu sync.Mutex
	var opts []*redis.Options
	_ = forEach(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		opts = append(opts, n.Options())
		return nil
	})
	return opts
}

// checkServers PINGs each server in parallel, and returns nil if every
// one answered, or else an error matching ErrUnavailable that names each
// server that did not and why.
func checkServers(ctx context.Context, servers []*redis.Options) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, o := range servers {
		wg.Go(func() { errs[i] = ping(ctx, o) })
	}
	wg.Wait()
	var down []string
	for i, err := range errs {
		if err != nil {
			down = append(down, servers[i].Addr+": "+err.Error())
		}
	}
	if len(down) == 0 {
		return nil
	}
	return &downError{strings.Join(down, "; ")}
}

// ping sends PING to the server o describes, on a connection of its own
// made with the client's dialer (TLS and all), and waits for a reply:
// nil if one came in time.
func ping(ctx context.Context, o *redis.Options) error {
	wait := maxCheckWait
	if o.ReadTimeout > 0 && o.ReadTimeout < wait {
		wait = max(o.ReadTimeout, minCheckWait)
	}
	dial := o.Dialer // set by go-redis for every client it makes
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, wait)
	conn, err := dial(dctx, cmp.Or(o.Network, "tcp"), o.Addr)
	cancel()
	if err != nil {
		return errors.New(dialCause(err))
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := conn.Write(pingCmd); err != nil {
		return errors.New(dialCause(err))
	}
	var b [1]byte
	if _, err := conn.Read(b[:]); err == nil {
		return nil
	} else if !timedOut(err) {
		return errors.New(dialCause(err))
	}
	_ = conn.SetReadDeadline(time.Now().Add(lateGrace))
	if _, err := conn.Read(b[:]); err == nil {
		return nil
	}
	return fmt.Errorf("no reply to PING within %v", wait)
}

// dialCause is err without what ping's message already says (the
// operation and the address): "connection refused", "i/o timeout".
func dialCause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		if op.Op == "dial" && timedOut(op.Err) {
			return "no connection within the check's wait (dial timed out)"
		}
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}
