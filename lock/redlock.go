package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A Redlock names a mutex held on a majority of independent Redis servers
// (the Redlock algorithm), so that it survives the loss of a minority of
// them: with 5 servers, any 2 may be down or restart empty. Acquiring it
// returns the same [Lease] as a [Mutex], with the same watchdog, lost-lease
// signal and release semantics.
//
// A lease is granted when a majority of servers accepted it, valid for the
// TTL minus the time since the request was sent minus a drift margin, on
// the caller's monotonic clock (see [Lease.Done]); a failed attempt is
// undone everywhere. Extend and the watchdog need a majority too; Unlock
// releases on all servers. Each call returns once a majority has decided,
// not when the slowest server answers, so a minority that hangs or is down
// costs a holder nothing (see the package doc on a bare majority).
//
// Redlock gives no fencing numbers ([Lease.Fence] returns 0): its servers
// have no common counter. Waiters poll with jittered backoff. A Redlock is
// safe for concurrent use; create one with [NewRedlock].
type Redlock struct {
	clients  []redis.UniversalClient
	releases []*redis.Script // per client: mutexRelease for its publish command
	name     string
	keys     []string // the lock: a Redlock has no fencing counter
	quorum   int
	opts     options
	invalid  error // an empty name (see checkName)
}

// NewRedlock returns the Redlock called name over clients, each a separate
// Redis deployment. It does no I/O. It panics if clients is empty or holds
// nil. An empty name makes every call return an error matching
// [ErrInvalid]. [WithFair] does not apply.
func NewRedlock(clients []redis.UniversalClient, name string, opts ...Option) *Redlock {
	if len(clients) == 0 {
		panic("lock: no redis clients (a programmer error)")
	}
	ks := newKeyspace("redlock", name)
	r := &Redlock{
		clients: slices.Clone(clients),
		name:    name,
		keys:    []string{string(ks)},
		quorum:  len(clients)/2 + 1,
		opts:    buildOptions("redlock", name, opts),
		invalid: checkName(name),
	}
	for _, c := range clients {
		redisutil.MustClient("lock", c)
		r.releases = append(r.releases, mutexRelease[wake.PublishCommand(c)])
	}
	return r
}

// Lock blocks until a majority of servers grant the lock or ctx is done
// (or the wait timeout passes, see [WithWaitTimeout]). If so many servers
// fail that no majority is possible, Lock returns their errors at once
// instead of waiting. On failure Lock holds nothing.
func (r *Redlock) Lock(ctx context.Context) (*Lease, error) {
	if r.invalid != nil {
		return nil, r.invalid
	}
	return acquire(ctx, nil, "", &r.opts, r.try)
}

// TryLock makes one attempt, on all servers at once. It reports false,
// with a nil error, if the lock is held; with an error if too many servers
// failed to reach a majority.
func (r *Redlock) TryLock(ctx context.Context) (*Lease, bool, error) {
	if r.invalid != nil {
		return nil, false, r.invalid
	}
	return tryOnce(ctx, &r.opts, r.try)
}

// nodeTimeout bounds each server's round trip during an acquire. A hung
// server costs an attempt nothing while a majority answers without it
// (see each); when its answer is needed, it costs a small part of the TTL
// rather than all of it.
func (r *Redlock) nodeTimeout() time.Duration { return max(r.opts.ttl/20, 50*time.Millisecond) }

// slowTimeout bounds each server's reply to a release, an extension or a
// TTL query. These do not race the lock's validity (an extension's counts
// from when it was sent), so a loaded server gets more time than during an
// acquire, but less than a third of the TTL, the watchdog's period.
func (r *Redlock) slowTimeout() time.Duration {
	return max(r.nodeTimeout(), min(r.opts.ttl/3, time.Second))
}

func (r *Redlock) try(ctx context.Context) (l *Lease, retry time.Duration, err error) {
	value := redisutil.TokenWith(':') // a plain mutex's value on each server
	token := value[:len(value)-1]
	sent := time.Now()
	// A reply that comes after the attempt returned is undone where it may
	// have taken the lock, once the attempt's outcome is known: if the
	// attempt failed, or its lease has been given up since (lost, or
	// released), as the release may have reached the server before the
	// grant. That holds from the moment Unlock starts, not once its release
	// round is over: a grant that lands on a server after the release did,
	// while the round waits for the others, would otherwise be kept there
	// for a whole TTL. A late grant for a live lease is part of it: the
	// watchdog extends it there too, and Unlock, sent after this check,
	// releases it.
	//
	// A server whose request failed after it may have been sent is barred
	// for this attempt, whatever its outcome (see redlockBar): the request
	// may still land there, after the lease's release.
	keys := []string{r.keys[0], r.keys[0] + ":bar:" + token}
	outcome := make(chan struct{})
	defer close(outcome)
	replies := r.each(ctx, r.nodeTimeout(), 0, func(ctx context.Context, c redis.UniversalClient, _ int) nodeReply {
		res, err := redlockAcquire.Run(ctx, c, keys, value, redisutil.Millis(r.opts.ttl)).Result()
		noWait := int64(-1) // Redlock waiters poll: no ticket, no hand-off
		rep := acquireReply(res, err, &noWait)
		return nodeReply{ok: rep.granted, v: rep.v, err: rep.err}
	}, func(i int, rep nodeReply) {
		<-outcome
		switch {
		case rep.ok && (l == nil || l.givenUp()):
			r.undo(ctx, value, i)
		case !rep.ok && redisutil.MayHaveRun(rep.err):
			r.bar(ctx, keys, value, i)
		}
	})
	v := r.tally(replies)
	r.bar(ctx, keys, value, v.unsure...)
	if len(v.grants) >= r.quorum && !hold.Late(sent, r.opts.ttl) {
		l = newLease(r, r.name, token, 0, sent, &r.opts)
		return l, 0, nil
	}
	// Not granted (or granted too late to be of use): undo where it was
	// taken.
	r.undo(ctx, value, v.grants...)
	if cerr := ctx.Err(); cerr != nil {
		return nil, 0, cerr
	}
	if v.alien > len(r.clients)-r.quorum {
		// Foreign data on so many servers that a majority is out of reach
		// until someone removes it: say so instead of waiting forever.
		return nil, 0, r.opts.foreign("acquire", r, v.alienErr)
	}
	if failed := len(v.errs); failed > len(r.clients)-r.quorum {
		return nil, 0, r.opts.failed(ctx, "acquire", fmt.Errorf("%d of %d servers failed, a majority is out of reach: %w",
			failed, len(r.clients), errors.Join(v.errs...)))
	}
	return nil, v.retry, nil
}

// votes sums up the replies to an acquire.
type votes struct {
	grants   []int // servers that granted: to undo if the attempt fails
	alien    int   // servers whose key holds foreign data
	alienErr error
	errs     []error       // of the servers that failed
	unsure   []int         // servers that failed after the request may have been sent: to bar
	retry    time.Duration // how long until the busy servers' holders expire, at most maxBackoff
}

func (r *Redlock) tally(replies []nodeReply) votes {
	v := votes{retry: r.opts.maxBackoff}
	for i, rep := range replies {
		switch {
		case foreign(rep.err):
			// That server answered: the key holds foreign data, so the
			// lock is busy there, not the server dead.
			v.alien++
			v.alienErr = rep.err
		case rep.err != nil:
			v.errs = append(v.errs, rep.err)
			if rep.err != errNoReply && redisutil.MayHaveRun(rep.err) {
				v.unsure = append(v.unsure, i) // an unanswered server's reply goes to late
			}
		case rep.ok:
			v.grants = append(v.grants, i)
		case rep.v > 0:
			v.retry = min(v.retry, retryAfter(rep.v, &r.opts))
		}
	}
	return v
}

// undo releases value on the servers given, in the background (see
// redisutil.Rollback): what an acquire that failed, or whose lease ended
// before its reply came, may have taken there.
func (r *Redlock) undo(ctx context.Context, value string, servers ...int) {
	if len(servers) == 0 {
		return
	}
	redisutil.Rollback(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, i := range servers {
			wg.Go(func() { _ = r.releases[i].Run(ctx, r.clients[i], r.keys, value).Err() })
		}
		wg.Wait()
	})
}

// bar undoes the attempt of value on the servers given, whose outcome is
// unknown, and bars it there for two TTLs (see redlockBar), in the
// background as undo does.
func (r *Redlock) bar(ctx context.Context, keys []string, value string, servers ...int) {
	if len(servers) == 0 {
		return
	}
	ms := redisutil.Millis(2 * r.opts.ttl)
	redisutil.Rollback(ctx, func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, i := range servers {
			wg.Go(func() { _ = redlockBar.Run(ctx, r.clients[i], keys, value, ms).Err() })
		}
		wg.Wait()
	})
}

func (r *Redlock) where() string { return keyList(r.keys[0]) }

// count runs a script that returns 1 for "done" on every server and
// returns how many did it, and the errors of those that failed (those
// that had not answered when the round was decided among them).
func (r *Redlock) count(ctx context.Context, timeout, linger time.Duration, f func(ctx context.Context, c redis.UniversalClient, i int) (int64, error)) (n, failed int, err error) {
	var errs []error
	for _, rep := range r.each(ctx, timeout, linger, func(ctx context.Context, c redis.UniversalClient, i int) nodeReply {
		v, err := f(ctx, c, i)
		return nodeReply{ok: err == nil && v == 1, v: v, err: err}
	}, nil) {
		switch {
		case foreign(rep.err):
			// It answered, and holds no lease of ours: foreign data.
		case rep.err != nil:
			errs = append(errs, rep.err)
		case rep.ok:
			n++
		}
	}
	return n, len(errs), errors.Join(errs...)
}

// release deletes the lock on every server; it reports true if a majority
// still held it.
func (r *Redlock) release(ctx context.Context, token string) (bool, error) {
	value := token + ":"
	// Once a majority released it, the rest get a moment more (the grace a
	// rollback gets, see redisutil.Rollback): a healthy server answers
	// within it, so the lock is normally gone everywhere when Unlock
	// returns, and a hung one does not hold Unlock up.
	n, unreachable, err := r.count(ctx, r.slowTimeout(), redisutil.RollbackGrace, func(ctx context.Context, c redis.UniversalClient, i int) (int64, error) {
		return r.releases[i].Run(ctx, c, r.keys, value).Int64()
	})
	// Servers that did not answer may still hold our key (a dead server
	// cannot grant it to anyone else while down): the lease was held to the
	// end unless the servers that answered show it expired on a majority.
	switch {
	case n+unreachable >= r.quorum && n > 0:
		return true, nil
	case n == 0 && unreachable >= r.quorum:
		return false, err
	}
	return false, nil // ErrNotHeld: it expired on a majority
}

// extend renews the lock on every server that holds it; it reports true if
// a majority did, false if a majority refused. Otherwise, with too many
// servers failing, it returns their errors: the watchdog then retries, and
// the safe deadline still holds.
func (r *Redlock) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	n, failed, err := r.count(ctx, r.slowTimeout(), 0, func(ctx context.Context, c redis.UniversalClient, _ int) (int64, error) {
		return mutexExtend.Run(ctx, c, r.keys, token, redisutil.Millis(ttl)).Int64()
	})
	if n >= r.quorum {
		return true, nil
	}
	if refused := len(r.clients) - n - failed; refused > len(r.clients)-r.quorum {
		return false, nil // whatever the others would say
	}
	return false, err
}

// pttl returns how long a majority of servers will still hold the lock.
func (r *Redlock) pttl(ctx context.Context, token string) (time.Duration, error) {
	var held []int64
	var errs []error
	for _, rep := range r.each(ctx, r.slowTimeout(), 0, func(ctx context.Context, c redis.UniversalClient, _ int) nodeReply {
		v, err := mutexPTTL.Run(ctx, c, r.keys, token).Int64()
		return nodeReply{ok: err == nil && v >= 0, v: v, err: err}
	}, nil) {
		switch {
		case foreign(rep.err):
		case rep.err != nil:
			errs = append(errs, rep.err)
		case rep.ok:
			held = append(held, rep.v)
		}
	}
	if len(held) < r.quorum {
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		return 0, ErrNotHeld
	}
	slices.Sort(held)
	slices.Reverse(held)
	return time.Duration(held[r.quorum-1]) * time.Millisecond, nil
}
