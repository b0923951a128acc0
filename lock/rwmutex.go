package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// ErrUpgrade is returned by [RWMutex.Upgrade] when the read lease cannot
// become a write lease at once because other readers hold the lock, or the
// read lease is no longer held. The read lease is unchanged.
var ErrUpgrade = errors.New("lock: cannot upgrade read lease")

// An RWMutex names a reader/writer mutual exclusion lock in Redis: any
// number of readers or a single writer may hold it, across all processes
// that use the same name. Each reader holds its own [Lease], which expires
// on its own, so a dead reader cannot keep writers out for more than one
// TTL.
//
// As with [sync.RWMutex], if any writer is waiting for the lock, new
// readers are not admitted, so a writer is not starved by a stream of
// overlapping readers: it waits only for the readers already inside. A
// waiting writer's claim is itself a lease of one TTL that it renews while
// waiting, so a writer that dies while waiting stops blocking readers
// within one TTL. Readers are not starved either: when a writer unlocks,
// the readers waiting at that moment are admitted before the next writer.
//
// A read lease is never upgraded by waiting: Lock called while the caller
// holds a read lease of the same name would wait for itself (until that
// lease expired). Use [RWMutex.Upgrade], which either converts the lease at
// once or fails with [ErrUpgrade], or release the read lease first.
//
// An RWMutex holds no state of its own and is safe for concurrent use. The
// zero value is not usable; create one with [NewRWMutex].
type RWMutex struct {
	client  redis.UniversalClient
	name    string
	keys    []string // base, r, rf, ww, fence, rq, ra: see scripts.go
	rd, wr  string   // wake-up channels of readers and writers
	publish string
	opts    options
	invalid error // an empty name (see checkName)
}

// NewRWMutex returns the reader/writer lock called name in client's Redis.
// It does no I/O. It panics if client is nil. An empty name makes every
// call return an error matching [ErrInvalid].
func NewRWMutex(client redis.UniversalClient, name string, opts ...Option) *RWMutex {
	redisutil.MustClient("lock", client)
	ks := newKeyspace("rw", name)
	rw := &RWMutex{
		client:  client,
		name:    name,
		keys:    []string{string(ks), ks.key("r"), ks.key("rf"), ks.key("ww"), ks.key("fence"), ks.key("rq"), ks.key("ra")},
		rd:      ks.key("rd"),
		wr:      ks.key("wr"),
		publish: wake.PublishCommand(client),
		opts:    buildOptions("rwmutex", name, opts),
		invalid: checkName(name),
	}
	rw.opts.watch(client)
	return rw
}

// RLock blocks until it holds the lock for reading or ctx is done (or the
// wait timeout passes, see [WithWaitTimeout]). It waits while a writer
// holds the lock or waits for it. On failure RLock returns an error
// matching [ErrNotObtained] and ctx.Err(), or a Redis error, and holds
// nothing; it has given up its place among the waiting readers, which may
// keep it up to 10 ms past ctx's deadline.
func (rw *RWMutex) RLock(ctx context.Context) (*Lease, error) {
	if rw.invalid != nil {
		return nil, rw.invalid
	}
	token := redisutil.Token() // one place among the waiting readers for the whole wait
	l, err := acquire(ctx, rw.client, rw.rd, &rw.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return rw.tryRead(ctx, token, "wait")
	})
	if leftBehind(err) {
		// Withdraw token's place among the waiting readers, and its read
		// if one was granted too late (see ask.grant) and not renewed.
		rw.opts.withdraw(ctx, func(ctx context.Context) {
			_ = rwRCancel.Run(ctx, rw.client, []string{rw.keys[5], rw.keys[6], rw.wr}, token, rw.publish).Err()
			_, _ = reader{rw}.release(ctx, token)
		})
	}
	return l, err
}

// TryRLock makes one attempt to lock for reading, in one round trip. It
// reports false, with a nil error, if a writer holds the lock or waits.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lease, bool, error) {
	if rw.invalid != nil {
		return nil, false, rw.invalid
	}
	return tryOnce(ctx, &rw.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return rw.tryRead(ctx, redisutil.Token(), "try")
	})
}

// Lock blocks until it holds the lock for writing or ctx is done (or the
// wait timeout passes). While it waits, new readers are kept out. On
// failure Lock returns an error matching [ErrNotObtained] and ctx.Err(), or
// a Redis error; it holds nothing and no longer keeps readers out (taking
// its claim back may keep it up to 10 ms past ctx's deadline).
func (rw *RWMutex) Lock(ctx context.Context) (*Lease, error) {
	if rw.invalid != nil {
		return nil, rw.invalid
	}
	token := redisutil.Token()
	l, err := acquire(ctx, rw.client, rw.wr, &rw.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return rw.tryWrite(ctx, token, "wait")
	})
	if leftBehind(err) {
		// Stop keeping readers out now, not when the claim expires.
		rw.opts.withdraw(ctx, func(ctx context.Context) { _, _ = writer{rw}.release(ctx, token) })
	}
	return l, err
}

// TryLock makes one attempt to lock for writing, in one round trip. It
// reports false, with a nil error, if a writer or a reader holds the lock;
// it does not keep readers out.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lease, bool, error) {
	if rw.invalid != nil {
		return nil, false, rw.invalid
	}
	return tryOnce(ctx, &rw.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return rw.tryWrite(ctx, redisutil.Token(), "try")
	})
}

// Upgrade turns r, a read lease of rw, into a write lease in one atomic
// step, if r's holder is the only reader. Otherwise it fails at once with
// [ErrUpgrade] and r stays a read lease, renewed as before if it was: two
// readers that both waited to upgrade would wait for each other forever.
// On success r has ended (as if unlocked, without an [EventLost]) and the
// returned lease keeps r's fencing number. If Redis fails to answer,
// Upgrade returns its error and r has ended too: the upgrade may have run,
// so both leases are released in the background. An error that stopped the
// request before it was sent (a failed dial) leaves r as it was. An upgrade
// whose reply comes after the write lease's safe deadline returns an error
// matching [ErrLost], r ended and the write lock released.
//
// r's watchdog ([WithAutoExtend]) pauses while the upgrade's round trip
// lasts: a renewal of the read lease racing with the script would find it
// gone and report it lost.
func (rw *RWMutex) Upgrade(ctx context.Context, r *Lease) (*Lease, error) {
	if r == nil || r.ended() {
		return nil, ErrUpgrade
	}
	if h, ok := r.h.(reader); !ok || h.rw.keys[0] != rw.keys[0] {
		return nil, ErrUpgrade
	}
	r.clk.PauseWatchdog()
	sent := time.Now()
	res, err := rwUpgrade.Run(ctx, rw.client, rw.keys[:3], r.token, redisutil.Millis(rw.opts.ttl)).Int64Slice()
	switch {
	case err != nil && !redisutil.MayHaveRun(err):
		r.clk.ResumeWatchdog()
		return nil, rw.opts.failed(ctx, "upgrade", err)
	case err != nil:
		// The script may have run with its reply lost: r's read may
		// have become a write lock that nobody knows it holds. Undo
		// both in the background (bounded), and end r: the caller
		// holds nothing now, rather than a lease that may be gone.
		releaseLater(ctx, writer{rw}, r.token)
		releaseLater(ctx, r.h, r.token)
		r.end(ErrLost)
		return nil, rw.opts.failed(ctx, "upgrade", err)
	case res[0] == 0:
		r.clk.ResumeWatchdog()
		return nil, ErrUpgrade
	case hold.Late(sent, rw.opts.ttl):
		// Upgraded, but the reply came after the write lease's safe
		// deadline (a network slower than the TTL): no lease to hand out
		// (see ask.grant). r is gone too: undo the write lock.
		releaseLater(ctx, writer{rw}, r.token)
		r.end(ErrLost)
		return nil, rw.opts.failed(ctx, "upgrade", fmt.Errorf("reply after the lease's safe deadline: %w", inner{ErrLost}))
	}
	r.end(ErrNotHeld)
	return newLease(writer{rw}, rw.name, r.token, res[1], sent, &rw.opts), nil
}

// Locked reports whether anyone holds the lock: a writer, or any live
// reader, in any process. A writer that waits does not count. It is a
// snapshot: the lock may change hands at once.
func (rw *RWMutex) Locked(ctx context.Context) (bool, error) {
	if rw.invalid != nil {
		return false, rw.invalid
	}
	var n int64
	err := rw.opts.guard(ctx, func() (err error) {
		n, err = rwLocked.Run(ctx, rw.client, rw.keys[:2]).Int64()
		return err
	})
	if err != nil {
		return false, rw.opts.failed(ctx, "locked", err)
	}
	return n == 1, nil
}

func (rw *RWMutex) tryRead(ctx context.Context, token, mode string) (*Lease, time.Duration, error) {
	a := ask{h: reader{rw}, name: rw.name, token: token, sent: time.Now(), o: &rw.opts, renew: mode == "wait"} // renews its place
	cmd, acked := rw.opts.script(ctx, rw.client, rwRLock, rw.keys, token, redisutil.Millis(rw.opts.ttl), mode, rw.opts.retentionMs)
	return a.grant(ctx, rw.opts.unacked(pair(cmd.Int64Slice()), acked))
}

func (rw *RWMutex) tryWrite(ctx context.Context, token, mode string) (*Lease, time.Duration, error) {
	a := ask{h: writer{rw}, name: rw.name, token: token, sent: time.Now(), o: &rw.opts, renew: mode == "wait"} // renews its claim
	cmd, acked := rw.opts.script(ctx, rw.client, rwLock, rw.keys, token, redisutil.Millis(rw.opts.ttl), mode, rw.opts.retentionMs)
	return a.grant(ctx, rw.opts.unacked(pair(cmd.Int64Slice()), acked))
}

// reader is the holder of a read lease.
type reader struct{ rw *RWMutex }

func (h reader) where() string { return h.rw.where() }

func (h reader) release(ctx context.Context, token string) (bool, error) {
	n, err := rwRUnlock.Run(ctx, h.rw.client, []string{h.rw.keys[1], h.rw.keys[2], h.rw.wr, h.rw.keys[6]}, token, h.rw.publish).Int64()
	return n == 1, err
}

func (h reader) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return h.rw.opts.extended(h.rw.opts.script(ctx, h.rw.client, semExtend, h.rw.keys[1:3], token, redisutil.Millis(ttl)))
}

func (h reader) pttl(ctx context.Context, token string) (time.Duration, error) {
	return pttlReply(semPTTL.Run(ctx, h.rw.client, h.rw.keys[1:2], token).Int64())
}

// writer is the holder of a write lease.
type writer struct{ rw *RWMutex }

func (h writer) where() string { return h.rw.where() }

func (rw *RWMutex) where() string {
	return keyList(append(rw.keys[:4:4], rw.keys[5:]...)...) // all but the fence
}

func (h writer) release(ctx context.Context, token string) (bool, error) {
	n, err := rwUnlock.Run(ctx, h.rw.client, []string{h.rw.keys[0], h.rw.keys[3], h.rw.rd, h.rw.wr, h.rw.keys[5], h.rw.keys[6]}, token, h.rw.publish).Int64()
	return n == 1, err
}

func (h writer) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return h.rw.opts.extended(h.rw.opts.script(ctx, h.rw.client, hashExtend, h.rw.keys[:1], token, redisutil.Millis(ttl)))
}

func (h writer) pttl(ctx context.Context, token string) (time.Duration, error) {
	return pttlReply(hashPTTL.Run(ctx, h.rw.client, h.rw.keys[:1], token).Int64())
}

// pttlReply interprets the reply of a PTTL script: milliseconds left, or
// -3 for a lease that is not held.
func pttlReply(n int64, err error) (time.Duration, error) {
	if err != nil {
		return 0, err
	}
	if n == -3 {
		return 0, ErrNotHeld
	}
	return time.Duration(n) * time.Millisecond, nil
}
