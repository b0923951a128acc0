package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A Semaphore names a weighted, fair counting semaphore in Redis: at most
// permits permits are held at a time, by any number of processes. Acquiring
// permits returns a [Lease]; [Lease.Unlock] gives them back.
//
// Waiters are served first come, first served, by a sequence number Redis
// assigns when they start waiting. As in [golang.org/x/sync/semaphore], a
// waiter that needs more permits than are free blocks those behind it, so
// a large request is never starved by small ones. Each waiter's place in the
// queue is itself a lease of one TTL that the waiter renews while it waits:
// a waiter that dies leaves the queue within one TTL and never blocks the
// head. The permits of a holder that dies come back within one TTL too.
//
// Every process must use the same permits for one name. A Semaphore holds
// no state of its own and is safe for concurrent use. The zero value is not
// usable; create one with [NewSemaphore].
//
// # Producers and consumers
//
// Some Redis semaphores (Ruby's redis-semaphore) double as a job queue (wait/signal with tokens
// carrying a payload). A Semaphore does not: a permit here is a lease that
// only its holder can give back, which is what makes it crash-safe. To hand
// work from producers to consumers, use a Redis list or stream (LPUSH and
// BLMOVE, or XADD and XREADGROUP), and bound the consumers' concurrency
// with a Semaphore if needed.
type Semaphore struct {
	client  redis.UniversalClient
	name    string
	permits int64
	keys    []string // h, n, q, qx, fence, base: see scripts.go
	prefix  string   // + token: a waiter's own wake-up channel
	publish string
	opts    options
	invalid error // an empty name (see checkName)

	// A fair mutex also holds the plain mutex's key (see asFairMutex).
	fairArg                 string // "1" for a fair mutex, else "0"
	releaseKeys, extendKeys []string
}

// NewSemaphore returns the semaphore called name, of permits permits, in
// client's Redis. It does no I/O. It panics if client is nil or permits is
// not positive. An empty name makes every call return an error matching
// [ErrInvalid].
func NewSemaphore(client redis.UniversalClient, name string, permits int64, opts ...Option) *Semaphore {
	if permits < 1 {
		panic(fmt.Sprintf("lock: semaphore of %d permits (a programmer error)", permits))
	}
	s := newSemaphore(client, newKeyspace("sem", name), name, permits, buildOptions("semaphore", name, opts))
	s.opts.watch(client)
	return s
}

// newSemaphore builds a semaphore in keyspace ks. A fair Mutex is one of a
// single permit in the mutex keyspace: its base key is the plain mutex's
// lock, so fair and plain lockers of one name still exclude each other, and
// both draw from the same fencing counter.
func newSemaphore(client redis.UniversalClient, ks keyspace, name string, permits int64, o options) *Semaphore {
	redisutil.MustClient("lock", client)
	s := &Semaphore{
		client:  client,
		name:    name,
		permits: permits,
		keys:    []string{ks.key("h"), ks.key("n"), ks.key("q"), ks.key("qx"), ks.key("fence"), string(ks)},
		prefix:  ks.key("wake:"),
		publish: wake.PublishCommand(client),
		opts:    o,
		fairArg: "0",
		invalid: checkName(name),
	}
	s.releaseKeys, s.extendKeys = s.keys[:4], s.keys[:2]
	return s
}

// asFairMutex makes s the fair side of a plain mutex whose key is s's base
// key and whose waiters listen on channel: a grant also sets the plain key,
// so plain lockers see the lock busy in their one SET NX, and a release
// deletes it and wakes plain waiters that marked it.
func (s *Semaphore) asFairMutex(channel string) {
	s.fairArg = "1"
	s.releaseKeys = []string{s.keys[0], s.keys[1], s.keys[2], s.keys[3], s.keys[5], channel}
	s.extendKeys = []string{s.keys[0], s.keys[1], s.keys[5]}
}

// Acquire blocks until it holds n permits or ctx is done (or the wait
// timeout passes, see [WithWaitTimeout]). It joins the back of the queue and
// is woken by a message when it reaches the head and permits are free. On
// failure Acquire returns an error matching [ErrNotObtained] and
// ctx.Err(), or a Redis error; it holds nothing, and has left the queue,
// which may keep it up to 10 ms past ctx's deadline (or will leave it
// within one TTL if Redis could not be reached in that time).
// Acquire panics if n is not between 1 and the semaphore's permits.
func (s *Semaphore) Acquire(ctx context.Context, n int64) (*Lease, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	token := redisutil.Token()
	l, err := acquire(ctx, s.client, s.prefix+token, &s.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return s.try(ctx, token, n, "wait")
	})
	if leftBehind(err) {
		// Leave the queue now rather than when the ticket expires: a ghost
		// at the head would hold up everyone behind it for one TTL.
		s.opts.withdraw(ctx, func(ctx context.Context) { _, _ = s.release(ctx, token) })
	}
	return l, err
}

// TryAcquire makes one attempt to acquire n permits, in one round trip,
// without joining the queue. It reports false, with a nil error, if fewer
// than n permits are free or others are already waiting (it never jumps
// the queue). TryAcquire panics if n is not between 1 and the semaphore's
// permits.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (*Lease, bool, error) {
	if err := s.check(n); err != nil {
		return nil, false, err
	}
	return tryOnce(ctx, &s.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		return s.try(ctx, redisutil.Token(), n, "try")
	})
}

// Available returns how many permits no live holder holds. It is a
// snapshot: waiters may take them at once.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	if s.invalid != nil {
		return 0, s.invalid
	}
	var n int64
	err := s.opts.guard(ctx, func() (err error) {
		n, err = semAvailable.Run(ctx, s.client, s.keys[:4], s.permits).Int64()
		return err
	})
	if err != nil {
		return 0, s.opts.failed(ctx, "available", err)
	}
	return n, nil
}

// check panics on a count no caller can be granted and returns the
// semaphore's invalid-name error, if any.
func (s *Semaphore) check(n int64) error {
	if n < 1 || n > s.permits {
		panic(fmt.Sprintf("lock: acquire %d of %d permits (a programmer error)", n, s.permits))
	}
	return s.invalid
}

func (s *Semaphore) try(ctx context.Context, token string, n int64, mode string) (*Lease, time.Duration, error) {
	a := ask{h: s, name: s.name, token: token, sent: time.Now(), o: &s.opts, renew: mode == "wait"} // renews its ticket
	cmd, acked := s.opts.script(ctx, s.client, semAcquire, s.keys, token, n, s.permits, redisutil.Millis(s.opts.ttl), mode, s.prefix, s.publish, s.opts.retentionMs, s.fairArg)
	return a.grant(ctx, s.opts.unacked(pair(cmd.Int64Slice()), acked))
}

func (s *Semaphore) where() string { return keyList(s.keys[:4]...) }

func (s *Semaphore) release(ctx context.Context, token string) (bool, error) {
	n, err := semRelease.Run(ctx, s.client, s.releaseKeys, token, s.permits, s.prefix, s.publish, s.fairArg).Int64()
	return n == 1, err
}

func (s *Semaphore) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	return s.opts.extended(s.opts.script(ctx, s.client, semExtend, s.extendKeys, token, redisutil.Millis(ttl), s.fairArg))
}

func (s *Semaphore) pttl(ctx context.Context, token string) (time.Duration, error) {
	n, err := semPTTL.Run(ctx, s.client, s.keys[:1], token).Int64()
	if err != nil {
		return 0, err
	}
	if n == -3 {
		return 0, ErrNotHeld
	}
	return time.Duration(n) * time.Millisecond, nil
}
