// Package breaker makes calls fail fast while Redis cannot be reached: one
// circuit breaker per go-redis client, shared by every Cache and lock made
// on that client.
//
// Without it, each call to a dead Redis costs what go-redis spends dialling
// and retrying (about 1.7 s with the default options), so a cache outage
// turns every request into a slow one, and a caller's short deadline only
// turns it into a timeout. The breaker learns of an outage from the
// client's dials as well as from the calls' round trips: a hook on the
// client (see hook.go) reports the first refused or failed dial, so the
// circuit opens within milliseconds of Redis dying, whatever the caller's
// deadline or go-redis's retry settings. While the circuit is open, calls
// fail at once with [ErrUnavailable], and so does any dial the client
// makes for anyone (the hook hands go-redis a connection that fails at
// once), so that go-redis's own pool never counts a dial as failed and
// never falls back to probing the server once a second on its own. After
// [cooldown] one call goes through as a probe; its success closes the
// circuit, its failure opens it for another cooldown.
//
// One failure is enough, and concurrent callers of one key share one round
// trip, so waiting for several failures would keep a hot key's callers
// waiting. Only errors that say Redis could not be reached count as
// failures; an error reply from a working server is a success, and the
// caller's own cancellation or an exhausted connection pool (load, not an
// outage) count as neither. A read that timed out may be one caller's
// short deadline on one slow reply: those count once three come in a row
// (see timeoutTrip).
//
// The breaker is a sony/gobreaker two-step breaker: a call asks before its
// first round trip and reports that round trip's outcome. Each outage is
// logged once when it begins and once when it ends, to every logger
// attached to the client's caches and locks (see log.go).
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

// ErrUnavailable is returned, wrapped with the operation that failed, by
// calls that skipped Redis because the client's circuit is open.
// dogpile.ErrUnavailable and lock.ErrUnavailable are this error; it lives in
// redisutil, whose MayHaveRun knows that such a call sent nothing.
var ErrUnavailable = redisutil.ErrUnavailable

const (
	// trip is how many failures in a row open the circuit (see the package
	// doc for why one).
	trip = 1

	// timeoutTrip is how many socket timeouts in a row, with no success in
	// between, count as a failure. A read that timed out may be the
	// caller's short deadline on one slow reply (go-redis reports a read
	// cut by a ContextTimeoutEnabled deadline as an i/o timeout, not the
	// context's error), and one slow reply must not turn every caller of
	// the client away; a frozen server times every call out, and reaches
	// three within a deadline or so under load.
	timeoutTrip = 3
	// cooldown is how long an open circuit fails calls before it lets one
	// probe through: short, so that callers see Redis back within about a
	// tenth of a second. A probe is cheap: while the circuit is open no dial
	// goes out (see hook.go), and a dead server's refused dial fails the
	// probe in a round trip.
	cooldown = 100 * time.Millisecond
)

// A Breaker guards the calls of one client.
//
// While the circuit is closed, which is nearly always, a call costs one
// atomic load and no allocation: with trip = 1 the first failure opens
// the circuit, so the successes and exclusions in between change nothing
// gobreaker would act on, and only a failure is handed to it. Open and
// half-open calls go through gobreaker in full (its probe accounting).
type Breaker struct {
	cb     *gobreaker.TwoStepCircuitBreaker[struct{}]
	closed atomic.Bool // gobreaker's state is closed (see OnStateChange)
	log    outageLog

	// timeouts counts the socket timeouts reported in a row (see
	// timeoutTrip); a success resets it.
	timeouts atomic.Int32

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
	nb := newBreaker(onOpen)
	nb.log.client = describe(client)
	b, loaded := breakers.LoadOrStore(client, nb)
	if !loaded {
		hookInto(client, nb)
	}
	return b
}

// New returns a closed breaker of its own (For shares one per client).
func New() *Breaker { return newBreaker(nil) }

// newBreaker returns a closed breaker that calls onOpen, if not nil, each
// time the circuit opens.
func newBreaker(onOpen func()) *Breaker {
	b := &Breaker{}
	b.log.remindEvery = stillDownEvery
	b.closed.Store(true)
	b.doneClosed = b.reportClosed
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests:  1, // one probe at a time
		Timeout:      cooldown,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= trip },
		IsSuccessful: func(err error) bool { return err == nil || !Unreachable(err) },
		IsExcluded:   excluded,
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.closed.Store(to == gobreaker.StateClosed)
			b.log.change(from, to)
			if to == gobreaker.StateOpen && onOpen != nil {
				onOpen()
			}
		},
	})
	return b
}

// Allow reports whether a call may go to Redis. If so, the call must pass
// the error of its first round trip to done. If not, Allow returns
// ErrUnavailable.
func (b *Breaker) Allow() (done func(error), err error) {
	if b.closed.Load() {
		return b.doneClosed, nil
	}
	report, err := b.cb.Allow()
	if err != nil {
		return nil, ErrUnavailable
	}
	return func(err error) {
		b.log.failed(err)
		report(err)
	}, nil
}

// reportClosed is done for a call let through a closed circuit: only a
// failure matters (see Breaker), and gobreaker counts it as a request it
// let through, as the call was. If the circuit opened meanwhile, another
// call's failure already did what this one would.
func (b *Breaker) reportClosed(err error) {
	switch {
	case err == nil:
		if b.timeouts.Load() != 0 { // a load, not a store, on every call
			b.timeouts.Store(0)
		}
	case timeout(err):
		if b.timeouts.Add(1) >= timeoutTrip {
			b.timeouts.Store(0)
			b.Fail(err)
		}
	case Unreachable(err) && !excluded(err):
		b.Fail(err)
	}
}

// timeout reports a socket timeout: a read or write that the connection's
// deadline cut short (see timeoutTrip).
func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && Unreachable(err)
}

// Fail reports a failure seen outside a call's first round trip (a dial),
// if the circuit lets a report in.
func (b *Breaker) Fail(err error) {
	if report, aerr := b.cb.Allow(); aerr == nil {
		b.log.failed(err)
		report(err)
	}
}

// Open reports whether calls fail fast now (the circuit is open or only
// lets its probe through).
// While the circuit is closed it costs one atomic load, as Allow does
// (gobreaker's State takes its mutex).
func (b *Breaker) Open() bool { return !b.closed.Load() && b.cb.State() != gobreaker.StateClosed }

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

// excluded reports an outcome that says nothing of Redis's health: the
// caller's own cancellation, or a pool exhausted by load.
func excluded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrPoolTimeout)
}
