// Package breaker makes calls fail fast while Redis cannot be reached: one
// circuit breaker per go-redis client, shared by every Cache and lock made
// on that client.
//
// Without it, each call to a dead Redis costs what go-redis spends dialling
// and retrying (about 1.7 s with the default options), and each call to a
// frozen one (a paused VM, a fork under memory pressure, a dead network
// path) waits out its deadline, so a cache outage turns every request into
// a slow one. While the circuit is open, calls fail at once with
// [ErrUnavailable], which names the servers found down and why.
//
// What opens the circuit is a server that does not answer the breaker
// itself. An error that says Redis could not be reached (a refused or
// failed dial: the client's dials are hooked, see hook.go; a reset or
// closed connection) or a call that timed out makes the breaker ask the
// servers the client's calls go to (see check.go): a PING on a connection
// of its own to each. A server that refuses it, or leaves it unanswered
// for half a second (less if the client's ReadTimeout is shorter), is
// down, and the circuit opens; a refused dial opens it within a round
// trip. A timeout alone proves nothing: the reply may be merely slow, or
// the client busy (every connection of its pool in use, its CPU starved),
// and go-redis may report a read that timed out as the caller's own
// context error after its retries; but a busy client's server answers the
// breaker's PING at once, and a frozen one (a paused VM, a fork under
// memory pressure, a dead network path) never does. Likewise a dial
// refused by a node that no longer serves the client (a Cluster's dead
// former master, dialled by go-redis while it reloads the slots) opens
// nothing. Timeouts start at most one round of PINGs per 100 ms.
//
// An error reply from a working server, the caller's own cancellation and
// an exhausted connection pool open nothing.
//
// While the circuit is open, after [cooldown] the next call waits (within
// its own deadline) while the breaker asks the servers again: if every one
// answers, the circuit closes and that call goes on; if not, it stays open
// for another cooldown. A server that comes back is found at the next
// round, within about a tenth of a second.
//
// The breaker is a sony/gobreaker two-step breaker. It changes nothing in
// the client for the program's own commands: they see go-redis's own
// errors (see hook.go for the one difference, a failed dial's retries).
// Each outage is logged once when it begins and once when it ends, to
// every logger attached to the client's caches and locks (see log.go).
package breaker

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/dogpile-go/dogpile/internal/perclient"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// ErrUnavailable is returned, wrapped with the operation that failed and
// with the servers found down, by calls that skipped Redis because the
// client's circuit is open. dogpile.ErrUnavailable and lock.ErrUnavailable
// are this error; it lives in redisutil, whose MayHaveRun knows that such
// a call sent nothing.
var ErrUnavailable = redisutil.ErrUnavailable

// cooldown is how long an open circuit fails calls before the servers are
// asked again: short, so that callers see Redis back within about a tenth
// of a second. Asking is cheap: a PING per server on a connection of its
// own, and a dead server's refused dial answers it in a round trip.
const cooldown = 100 * time.Millisecond

// A Breaker guards the calls of one client.
//
// While the circuit is closed, which is nearly always, a call costs one
// atomic load and no allocation: the first failure opens the circuit, so
// the successes in between change nothing gobreaker would act on, and
// only a failure is handed to it.
type Breaker struct {
	cb     *gobreaker.TwoStepCircuitBreaker[struct{}]
	closed atomic.Bool // gobreaker's state is closed (see OnStateChange)
	// closings counts the circuit's closings: what a caller saw while it
	// was open, it can tell is from before Redis came back (see Closings).
	closings atomic.Uint64
	log      outageLog

	// check asks the client's servers whether they answer (see check.go);
	// nil for a breaker of its own (New), whose probe is a call.
	check     func(context.Context) error
	checking  atomic.Bool  // a check that a timeout started is running
	lastCheck atomic.Int64 // when it started, in Unix nanoseconds

	// down is the error calls get while the circuit is open: ErrUnavailable
	// with the servers found down.
	down atomic.Pointer[downError]

	// doneClosed is the done of a call let through a closed circuit, made
	// once: a func made per call would cost every hit an allocation.
	doneClosed func(error)
}

// breakers holds one Breaker per client, as long as the client lives.
var breakers perclient.Map[*Breaker]

// For returns client's breaker, creating it on first use and hooking it
// into the client's dials (see hook.go).
func For(client redis.UniversalClient) *Breaker {
	if b, ok := breakers.Load(client); ok {
		return b
	}
	var onOpen func()
	if cc, ok := client.(*redis.ClusterClient); ok {
		// go-redis reloads a cluster's slots after a MOVED reply, or once a
		// minute, never because a node stopped answering: with a master
		// dead and its replica promoted, every call (and probe) would go
		// to the dead address for up to a minute. Each opening (the first
		// failure, then each failed probe) asks for a reload; go-redis
		// runs it in the background, at most one at a time. Weak: the
		// breaker must not keep its client alive.
		wc := weak.Make(cc)
		onOpen = func() {
			if cc := wc.Value(); cc != nil {
				cc.ReloadState(context.Background())
			}
		}
	}
	nb := newBreaker(checker(client), onOpen)
	nb.log.client = describe(client)
	b, loaded := breakers.LoadOrStore(client, nb)
	if !loaded {
		hookInto(client, nb)
	}
	return b
}

// New returns a closed breaker of its own (For shares one per client).
// It has no servers to ask: after the cooldown, a call goes through as the
// probe, and its outcome closes the circuit or opens it again. check, if
// not nil, stands for the servers instead.
func New(check func(context.Context) error) *Breaker { return newBreaker(check, nil) }

// newBreaker returns a closed breaker that asks its servers with check and
// calls onOpen, if not nil, each time the circuit opens.
func newBreaker(check func(context.Context) error, onOpen func()) *Breaker {
	b := &Breaker{check: check}
	b.log.remindEvery = stillDownEvery
	b.closed.Store(true)
	b.doneClosed = b.reportClosed
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests:  1, // one probe at a time
		Timeout:      cooldown,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
		IsSuccessful: func(err error) bool { return err == nil || !Unreachable(err) && !timedOut(err) },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.closed.Store(to == gobreaker.StateClosed)
			if to == gobreaker.StateClosed {
				b.closings.Add(1)
			}
			b.log.change(from, to)
			if to == gobreaker.StateOpen && onOpen != nil {
				onOpen()
			}
		},
	})
	return b
}

// Allow reports whether a call may go to Redis. If so, the call must pass
// the error of its first round trip to done. If not, Allow returns an
// error matching ErrUnavailable. While the circuit is open, the first call
// after the cooldown waits, within ctx, for the breaker to ask the
// servers, and goes on if they answer.
func (b *Breaker) Allow(ctx context.Context) (done func(error), err error) {
	if b.closed.Load() {
		return b.doneClosed, nil
	}
	report, err := b.cb.Allow()
	if err != nil {
		return nil, b.unavailable()
	}
	if b.check == nil { // New without servers: this call is the probe
		return func(err error) { b.settle(report, err) }, nil
	}
	if err := b.probe(ctx, report); err != nil {
		return nil, err
	}
	return b.doneClosed, nil
}

// reportClosed is done for a call let through a closed circuit: only a
// failure matters (see Breaker), and gobreaker counts it as a request it
// let through, as the call was. A timeout makes the breaker ask the
// servers (see the package doc).
func (b *Breaker) reportClosed(err error) {
	switch {
	case err == nil:
	case errors.Is(err, redis.ErrPoolTimeout):
		// The client is busy; the servers are not in question.
	case timedOut(err):
		b.suspect(err, checkEvery)
	case Unreachable(err):
		b.suspect(err, 0)
	}
}

// Observe reports the outcome of a round trip that did not ask the
// circuit first (a lock's release, say), as a call's done would: a
// failure opens the circuit, a timeout makes the breaker ask the servers.
func (b *Breaker) Observe(err error) {
	if err != nil && b.closed.Load() {
		b.reportClosed(err)
	}
}

// Fail reports a failure seen outside a call's first round trip (a dial,
// a check), if the circuit lets a report in.
func (b *Breaker) Fail(err error) {
	if report, aerr := b.cb.Allow(); aerr == nil {
		b.settle(report, err)
	}
}

// settle hands err, the outcome of a call, a probe or a check, to
// gobreaker through report, after recording what calls will be told if it
// opens the circuit.
func (b *Breaker) settle(report func(error), err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		b.down.Store(b.downFor(err))
		b.log.failed(err)
	}
	report(err)
}

// Open reports whether calls fail fast now (the circuit is open or only
// lets its probe through).
// While the circuit is closed it costs one atomic load, as Allow does
// (gobreaker's State takes its mutex).
func (b *Breaker) Open() bool { return !b.closed.Load() && b.cb.State() != gobreaker.StateClosed }

// Closings counts the times the circuit closed since the breaker was
// made: a value kept when it was n, and served only while Redis is
// unreachable, is stale news once it is more (dogpile's WithStaleIfDown).
func (b *Breaker) Closings() uint64 { return b.closings.Load() }

// Unreachable reports whether err means Redis could not be reached: a
// network error (refused, reset, a timeout on the socket, a closed
// connection) as opposed to an error reply from a server that works, an
// error of the caller's own (its context), or one of the library's.
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // context.DeadlineExceeded is a net.Error too
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, ErrUnavailable)
}

// timedOut reports a call that timed out: its socket's deadline passed
// (the client's ReadTimeout, or the caller's deadline with
// ContextTimeoutEnabled), or the caller's deadline ended the call. go-redis
// reports a read that a deadline cut as an i/o timeout, or, when it had a
// retry left, as context.DeadlineExceeded: its retry's backoff found the
// deadline gone.
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
