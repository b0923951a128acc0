// Package breaker makes calls fail fast while Redis cannot be reached: one
// circuit breaker per go-redis client, shared by every Cache and lock made
// on that client.
//
// Without it, each call to a dead Redis costs what go-redis spends dialling
// and retrying (about 1.7 s with the default options), so a cache outage
// turns every request into a slow one. When a call fails to reach Redis,
// the circuit opens: calls skip Redis and fail at once with
// [ErrUnavailable]. After [cooldown] one call goes through as a probe; its
// success closes the circuit, its failure opens it for another cooldown.
//
// One failure is enough: the failure a call sees comes after go-redis's own
// retries (MaxRetries, 3 by default, so 4 connection failures in a row over
// more than a second), and concurrent callers of one key share one round
// trip, so waiting for several such calls would keep a hot key's callers
// waiting for several seconds. A client made with MaxRetries -1 has no
// retries to absorb a blip: one lost connection then costs one cooldown of
// fast failures.
//
// The breaker is a sony/gobreaker two-step breaker: a call asks before its
// first round trip and reports that round trip's outcome. Only errors that
// say Redis could not be reached count as failures; an error reply from a
// working server is a success, and the caller's own cancellation or an
// exhausted connection pool (load, not an outage) count as neither.
package breaker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrUnavailable is returned, wrapped, by calls that skipped Redis because
// the client's circuit is open. dogpile.ErrUnavailable and
// lock.ErrUnavailable are this error.
var ErrUnavailable = errors.New("dogpile: redis unavailable (circuit open)")

const (
	// trip is how many calls in a row must fail to reach Redis before the
	// circuit opens (see the package doc for why one).
	trip = 1
	// cooldown is how long an open circuit fails calls before it lets one
	// probe through. Short, so that callers see Redis back within about a
	// second of its return (the probe itself may spend part of go-redis's
	// retry backoff).
	cooldown = 250 * time.Millisecond
)

// A Change is a transition of the circuit that a caller should log.
type Change int

const (
	None   Change = iota
	Opened        // Redis became unreachable: calls now fail fast
	Closed        // a probe reached Redis again
)

// Log logs ch, the transition a call's outcome err caused, to l (if any),
// as pkg ("dogpile", "lock") with attrs: every Cache and lock logs an
// outage's start and end the same way.
func (ch Change) Log(ctx context.Context, l *slog.Logger, pkg string, err error, attrs ...slog.Attr) {
	if l == nil {
		return
	}
	switch ch {
	case Opened:
		l.LogAttrs(ctx, slog.LevelError, pkg+": redis unreachable; calls fail fast until it answers again",
			append(attrs, slog.Any("error", err))...)
	case Closed:
		l.LogAttrs(ctx, slog.LevelInfo, pkg+": redis reachable again", attrs...)
	}
}

// A Breaker guards the calls of one client.
//
// While the circuit is closed, which is nearly always, a call costs one
// atomic load and no allocation: with trip = 1 the first failure opens
// the circuit, so the successes and exclusions in between change nothing
// gobreaker would act on, and only a failure is handed to it. Open and
// half-open calls go through gobreaker in full (its probe accounting).
type Breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	closed  atomic.Bool  // gobreaker's state is closed (see OnStateChange)
	changed atomic.Int32 // a Change not yet claimed by a caller

	// doneClosed is the done of a call let through a closed circuit, made
	// once: a func made per call would cost every hit an allocation.
	doneClosed func(error) Change
}

// breakers holds one Breaker per client. Clients are meant to live as long
// as the process (go-redis's advice), so the few entries are never removed.
var breakers sync.Map // redis.UniversalClient -> *Breaker

// For returns client's breaker, creating it on first use.
func For(client redis.UniversalClient) *Breaker {
	if b, ok := breakers.Load(client); ok {
		return b.(*Breaker)
	}
	var onOpen func()
	if cc, ok := client.(*redis.ClusterClient); ok {
		// go-redis reloads a cluster's slots after a MOVED reply, or once a
		// minute, never because a node stopped answering: with a master
		// dead and its replica promoted, every call (and probe) would go
		// to the dead address for up to a minute. Each opening (the first
		// failure, then each failed probe) asks for a reload; go-redis
		// runs it in the background, at most one at a time.
		onOpen = func() { cc.ReloadState(context.Background()) }
	}
	b, _ := breakers.LoadOrStore(client, newBreaker(onOpen))
	return b.(*Breaker)
}

// New returns a closed breaker of its own (For shares one per client).
func New() *Breaker { return newBreaker(nil) }

// newBreaker returns a closed breaker that calls onOpen, if not nil, each
// time the circuit opens.
func newBreaker(onOpen func()) *Breaker {
	b := &Breaker{}
	b.closed.Store(true)
	b.doneClosed = b.reportClosed
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests:  1,
		Timeout:      cooldown,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= trip },
		IsSuccessful: func(err error) bool { return err == nil || !Unreachable(err) },
		IsExcluded:   excluded,
		OnStateChange: func(_ string, _, to gobreaker.State) {
			b.closed.Store(to == gobreaker.StateClosed)
			switch to {
			case gobreaker.StateOpen:
				b.changed.Store(int32(Opened))
				if onOpen != nil {
					onOpen()
				}
			case gobreaker.StateClosed:
				b.changed.Store(int32(Closed))
			}
		},
	})
	return b
}

// Allow reports whether a call may go to Redis. If so, the call must pass
// the error of its first round trip to done, which returns the transition
// that outcome caused, for the caller to log (each one is returned once).
// If not, Allow returns an error matching [ErrUnavailable].
func (b *Breaker) Allow() (done func(error) Change, err error) {
	if b.closed.Load() {
		return b.doneClosed, nil
	}
	report, err := b.cb.Allow()
	if err != nil {
		return nil, ErrUnavailable
	}
	return func(err error) Change {
		report(err)
		return b.claim()
	}, nil
}

// reportClosed is done for a call let through a closed circuit: only a
// failure matters (see Breaker), and gobreaker counts it as a request it
// let through, as the call was. If the circuit opened meanwhile, another
// call's failure already did what this one would.
func (b *Breaker) reportClosed(err error) Change {
	if err != nil && Unreachable(err) && !excluded(err) {
		if report, aerr := b.cb.Allow(); aerr == nil {
			report(err)
		}
	}
	return b.claim()
}

// claim returns the Change not yet claimed, if any, and clears it. It
// reads before it writes: every call of every goroutine comes here, and a
// write on each would bounce the word between cores.
func (b *Breaker) claim() Change {
	if b.changed.Load() == int32(None) {
		return None
	}
	return Change(b.changed.Swap(int32(None)))
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
