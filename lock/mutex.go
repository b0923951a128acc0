package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A Mutex names a mutual exclusion lock in Redis, shared by every process
// that uses the same name. Acquiring it returns a [Lease], one owner's hold.
//
// A Mutex holds no state of its own: it is safe for concurrent use, and any
// number of Mutex values for one name, in any number of processes, exclude
// each other. The zero value is not usable; create one with [NewMutex].
type Mutex struct {
	client  redis.UniversalClient
	name    string
	lock    string // "token:", with the lease TTL (see mutex_scripts.go)
	fence   string // fencing counter, kept for the retention (WithRetention)
	channel string // wake-ups on release
	publish string
	fairKey string     // the fair holders of the same name (see WithFair)
	fair    *Semaphore // non-nil with WithFair
	opts    options
	invalid error // an empty name (see checkName), returned by every call

	// Argument lists built once: go-redis copies them, and an acquire or a
	// release should cost the caller no allocation it can avoid.
	acquireKeys, lockKeys []string
	ttlArg, retentionArg  any
	releaseScript         *redis.Script // mutexRelease for the publish command
	batch                 *batcher      // the client's: overlapping calls share round trips
}

// NewMutex returns the mutex called name in client's Redis. It does no I/O.
// It panics if client is nil. An empty name makes every call return an
// error matching [ErrInvalid].
func NewMutex(client redis.UniversalClient, name string, opts ...Option) *Mutex {
	redisutil.MustClient("lock", client)
	ks := newKeyspace("mutex", name)
	names := ks.names("fence", "wake", "h")
	m := &Mutex{
		client:  client,
		name:    name,
		lock:    names[0],
		fence:   names[1],
		channel: names[2], // = lock+":wake", as mutexRelease publishes
		fairKey: names[3], // = m.fair.keys[0]
		publish: wake.PublishCommand(client),
		invalid: checkName(name),
	}
	m.opts.build("mutex", name, opts)
	m.opts.watch(client) // before the fair semaphore copies the options
	if m.opts.fair {
		m.fair = newSemaphore(client, ks, name, 1, m.opts)
		m.fair.asFairMutex(m.channel)
	}
	// Capped, so that nothing appended to one overwrites the other.
	m.acquireKeys, m.lockKeys = names[0:2:2], names[0:1:1]
	m.releaseScript = mutexRelease[m.publish]
	m.batch = batcherFor(client)
	m.ttlArg, m.retentionArg = redisutil.Millis(m.opts.ttl), m.opts.retentionMs
	return m
}

// Lock blocks until it acquires the mutex or ctx is done (or the wait
// timeout passes, see [WithWaitTimeout]). With [WithFair], waiters are
// served in arrival order, as by a [Semaphore] of one permit. Waiters are
// woken by a message Redis publishes on release, not by polling; each wait
// is still bounded by the holder's remaining TTL, so a lost message or a
// crashed holder costs at most one TTL. On failure Lock returns an error
// matching [ErrNotObtained] and ctx.Err(), or a Redis error, and holds
// nothing; a waiter has taken back its place in line, which may keep it
// up to 10 ms past ctx's deadline (see "Deadlines" in the package doc).
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	if m.invalid != nil {
		return nil, m.invalid
	}
	if m.fair != nil {
		return m.fair.Acquire(ctx, 1)
	}
	var ticket int64
	l, err := acquire(ctx, m.client, m.channel, &m.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return m.try(ctx, &ticket)
	})
	if err != nil && ticket > 0 && leftBehind(err) {
		// A waiter that gives up withdraws its claim, so that the next
		// release does not reserve the lock for it (see mutexWithdraw).
		m.opts.withdraw(ctx, func(ctx context.Context) {
			_ = mutexWithdraw[m.publish].Run(ctx, m.client, m.lockKeys, ticket).Err()
		})
	}
	return l, err
}

// TryLock makes one attempt to acquire the mutex, in one round trip. It
// reports false, with a nil error, if another owner holds it (or, with
// [WithFair], if others are waiting for it).
func (m *Mutex) TryLock(ctx context.Context) (*Lease, bool, error) {
	if m.invalid != nil {
		return nil, false, m.invalid
	}
	if m.fair != nil {
		return m.fair.TryAcquire(ctx, 1)
	}
	return tryOnce(ctx, &m.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		noWait := int64(-1)
		return m.try(ctx, &noWait)
	})
}

// Locked reports whether anyone holds the mutex: a plain or a fair holder,
// in any process. It is a snapshot: the lock may change hands at once.
func (m *Mutex) Locked(ctx context.Context) (bool, error) {
	if m.invalid != nil {
		return false, m.invalid
	}
	var n int64
	err := m.opts.guard(ctx, func() (err error) {
		n, err = mutexLocked.Run(ctx, m.client, []string{m.lock, m.fairKey}).Int64()
		return err
	})
	if err != nil {
		return false, m.opts.failed(ctx, "locked", err)
	}
	return n == 1, nil
}

// try makes one attempt. *ticket is the waiter's place in line (see
// mutex_scripts.go): 0 before its first attempt, which draws it; -1 for
// an attempt that will not wait (TryLock).
func (m *Mutex) try(ctx context.Context, ticket *int64) (*Lease, time.Duration, error) {
	value := redisutil.TokenWith(':') // the lock's value (see mutex_scripts.go)
	token := value[:len(value)-1]
	// A waiter of this process that takes the lock while others of this
	// process still wait marks it, so that its release wakes them.
	mark := noMark
	if wake.Waiting(m.client, m.channel) > 0 {
		mark = awaitedMark
	}
	a := ask{h: m, name: m.name, token: token, sent: time.Now(), o: &m.opts}
	var res any
	var err error
	if m.opts.acks > 0 { // on its own: WAIT follows the script on its connection
		var t any = *ticket
		if *ticket == 0 {
			t = noTicket
		}
		cmd, acked := m.opts.script(ctx, m.client, mutexAcquire, m.acquireKeys, value, m.ttlArg, t, mark, m.retentionArg)
		res, err = cmd.Result()
		return a.grant(ctx, m.opts.unacked(acquireReply(res, err, ticket), acked))
	}
	if *ticket == 0 && mark == noMark && m.opts.retention == DefaultRetention {
		// The common call: the script's defaults, three arguments fewer.
		res, err = runScript(ctx, m.batch, m.client, mutexAcquire, m.acquireKeys, value, m.ttlArg).Result()
	} else {
		var t any = *ticket
		if *ticket == 0 {
			t = noTicket
		}
		res, err = runScript(ctx, m.batch, m.client, mutexAcquire, m.acquireKeys, value, m.ttlArg, t, mark, m.retentionArg).Result()
	}
	return a.grant(ctx, acquireReply(res, err, ticket))
}

// awaitedMark is the mark appended to a lock's value when someone waits
// for it; noTicket is a first attempt's ticket. Both are boxed once: an
// acquire should not allocate for them.
var awaitedMark, noMark, noTicket any = "+", "", int64(0)

// replyForeign is mutexAcquire's reply for a key without TTL: foreign data.
const replyForeign = 0

// handoffGrace is how long a released lock stays reserved for its oldest
// waiter (see mutex_scripts.go): enough for the wake-up and its attempt to
// arrive; if that waiter is gone, others wait this much longer once.
const handoffGrace = 10 * time.Millisecond

var graceArg any = redisutil.Millis(handoffGrace)

// acquireReply reads mutexAcquire's reply: a fence (> 0) when granted;
// replyForeign; or {-1 - the holder's PTTL, the caller's ticket}, which is
// stored in *ticket unless that is -1 (no waiting, no ticket).
func acquireReply(res any, err error, ticket *int64) reply {
	if err != nil {
		return reply{err: err}
	}
	switch r := res.(type) {
	case int64:
		if r == replyForeign {
			return reply{err: errNoTTL}
		}
		return reply{granted: true, v: r}
	case []any:
		if len(r) == 2 {
			pttl, ok1 := r[0].(int64)
			t, ok2 := r[1].(int64)
			if ok1 && ok2 {
				if *ticket >= 0 {
					*ticket = t
				}
				return reply{v: -1 - pttl}
			}
		}
	}
	return reply{err: fmt.Errorf("unexpected reply %v", res)}
}

func (m *Mutex) where() string { return keyList(m.lock) }

// release ends token's hold: the lock's value is "token:", with a
// waiter's mark after it if one marked it.
func (m *Mutex) release(ctx context.Context, token string) (bool, error) {
	n, err := runScript(ctx, m.batch, m.client, m.releaseScript, m.lockKeys, token+":").Int64()
	return n == 1, err
}

func (m *Mutex) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return m.opts.extended(m.opts.script(ctx, m.client, mutexExtend, m.lockKeys, token, redisutil.Millis(ttl)))
}

func (m *Mutex) pttl(ctx context.Context, token string) (time.Duration, error) {
	n, err := mutexPTTL.Run(ctx, m.client, m.lockKeys, token).Int64()
	if err != nil {
		return 0, err
	}
	if n == -3 {
		return 0, ErrNotHeld
	}
	return time.Duration(n) * time.Millisecond, nil
}
