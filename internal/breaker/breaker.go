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
	"sync"
	"sync/atomic"
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

// A Breaker guards the calls of one client.
type Breaker struct {
	cb      *gobreaker.TwoStepCircuitBreaker[struct{}]
	changed atomic.Int32 // a Change not yet claimed by a caller
}

// breakers holds one Breaker per client. Clients are meant to live as long
// as the process (go-redis's advice), so the few entries are never removed.
var breakers sync.Map // redis.UniversalClient -> *Breaker

// For returns client's breaker, creating it on first use.
func For(client redis.UniversalClient) *Breaker {
	if b, ok := breakers.Load(client); ok {
		return b.(*Breaker)
	}
	b, _ := breakers.LoadOrStore(client, New())
	return b.(*Breaker)
}

// New returns a closed breaker of its own (For shares one per client).
func New() *Breaker {
	b := &Breaker{}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		MaxRequests: 1,
		Timeout:     cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= trip },
		IsSuccessful: func(err error) bool {
			return err == nil || !Unreachable(err)
		},
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
				errors.Is(err, redis.ErrPoolTimeout)
		},
		OnStateChange: func(_ string, _, to gobreaker.State) {
			switch to {
			case gobreaker.StateOpen:
				b.changed.Store(int32(Opened))
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
	report, err := b.cb.Allow()
	if err != nil {
		return nil, ErrUnavailable
	}
	return func(err error) Change {
		report(err)
		return Change(b.changed.Swap(int32(None)))
	}, nil
}

// Open reports whether calls fail fast now (the circuit is open or only
// lets its probe through).
func (b *Breaker) Open() bool { return b.cb.State() != gobreaker.StateClosed }

// Unreachable reports whether err means Redis could not be reached, as
// opposed to an error reply from a server that works or the caller's own
// cancellation.
func Unreachable(err error) bool {
	var re redis.Error
	return !errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrClosed)
}
