package near

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// A session is one life of a tracking connection: connect (OnConnect turns
// tracking on, redirected to the connection itself), subscribe to the
// invalidations, apply them, and end at the first sign of trouble. keep
// starts the next one.

// keep runs sessions on one node until ctx ends, pausing between them.
func (t *Tracker) keep(ctx context.Context, o *redis.Options, of int, refused *refused, heard *atomic.Int64) {
	var id atomic.Int64 // of the subscriber's connection
	cl := redis.NewClient(trackingOptions(o, t.cfg.Ping, refused, &id))
	defer cl.Close()
	pause := 10 * time.Millisecond
	for n := 0; ctx.Err() == nil && refused.err.Load() == nil; n++ {
		if n > 0 && t.BeforeSession != nil {
			t.BeforeSession()
		}
		wasUp := false
		err := t.session(ctx, cl, heard, func() (stop func()) {
			rd, end := t.startReaders(o, id.Load())
			t.setReaders(o.Addr, rd)
			if !wasUp {
				wasUp = true
				t.up(true, false, of)
			}
			return func() {
				t.setReaders(o.Addr, nil)
				end()
			}
		})
		if refusal(err) {
			// The subscription was refused (an ACL user without the
			// permission for the invalidation channel: Redis 7's default
			// resetchannels): retrying would never get further.
			refused.record(err)
		}
		if wasUp {
			// Lost, unless the tracker ended the session (idle, stopped,
			// a Cluster's masters moved): copies are kept only through a
			// failure.
			t.up(false, ctx.Err() == nil, of)
			pause = 10 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, t.cfg.Backoff)
	}
}

// session subscribes to the invalidations on cl's connection, whose
// OnConnect has turned tracking on, and applies them until the connection
// fails or stops answering. up is called once the subscription is in
// place, and returns what ends the readers it starts; heard is advanced by
// the answers to the session's beats.
func (t *Tracker) session(ctx context.Context, cl *redis.Client, heard *atomic.Int64, up func() (stop func())) error {
	ps := cl.Subscribe(ctx)
	defer ps.Close()
	// A read does not heed ctx: it waits out its timeout (Ping).
	// Closing the connection ends it at once, so that a tracker that stops
	// (idle) or moves (a Cluster's failover) bypasses the tier now, not a
	// ping later, while the old master may no longer see the writes.
	defer context.AfterFunc(ctx, func() { _ = ps.Close() })()
	sctx, stop := context.WithCancel(ctx)
	var beats sync.WaitGroup
	defer func() {
		stop()
		_ = ps.Close()
		beats.Wait() // a ping in progress waits out its write timeout at most
	}()
	// The beat's first ask is taken now, before the subscription is sent:
	// a Sync that asks after the subscription's answer (sent, which heard
	// takes) reaches the beat even if its goroutine starts later.
	ask := t.asked.wait()
	sent := Now()
	if err := ps.Subscribe(ctx, invalidateChannel); err != nil {
		return err
	}
	var stopReaders func() // set once the subscription is in place
	defer func() {
		if stopReaders != nil {
			stopReaders() // before the beats end
		}
	}()
	for ctx.Err() == nil {
		msg, err := t.receive(ctx, ps)
		if err != nil {
			// Also a FLUSHALL, whose message go-redis cannot parse: the
			// session ends and the tier is flushed.
			return err
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" || m.Channel != invalidateChannel {
				continue
			}
			if stopReaders != nil {
				// go-redis replaced a broken connection and subscribed
				// again: what was sent on the old one may be lost.
				return errReplaced
			}
			heard.Store(sent)
			stopReaders = up()
			beats.Go(func() {
				if t.beforeBeat != nil {
					t.beforeBeat(sctx, false)
				}
				beat(sctx, ps, &t.asked, ask, t.cfg.Beat)
			})
		case *redis.Pong:
			if at, err := strconv.ParseInt(m.Payload, 10, 64); err == nil && at > heard.Load() {
				heard.Store(at)
				t.answered.announce()
			}
		case *redis.Message:
			t.apply(m)
		}
	}
	return ctx.Err()
}

// receive returns the next message on ps. A silence of Ping is met with a
// ping, whose answer is a message too; a second silence in a row, like
// any other error, is returned.
func (t *Tracker) receive(ctx context.Context, ps *redis.PubSub) (any, error) {
	pinged := false
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, t.cfg.Ping)
		var ne net.Error
		switch {
		case err == nil:
			return msg, nil
		case errors.As(err, &ne) && ne.Timeout() && !pinged:
			pinged = true
			if err := ps.Ping(ctx); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
	return nil, ctx.Err()
}

// apply applies a message of the invalidation channel. Redis's
// invalidations are arrays of keys. A string payload can only be a
// PUBLISH to the channel by some client: ignored, so that no client can
// flush the fleet's near tiers (or hold a value in them, for that matter:
// nothing is ever kept on a message's say-so). A FLUSHALL's null payload
// is an error of receive.
func (t *Tracker) apply(m *redis.Message) {
	if m.Channel != invalidateChannel || m.PayloadSlice == nil {
		return
	}
	if t.BeforeApply != nil {
		t.BeforeApply()
	}
	t.x.invalidate(m.PayloadSlice)
}

// Heard reports whether every tracked node has proven, by answering a
// ping sent at most MaxLag before now, that the tier has applied every
// invalidation sent before then (see Config.Beat).
func (t *Tracker) Heard(now int64) bool { return t.heardAfter(now - int64(t.cfg.MaxLag)) }

// heardAfter reports whether every tracked node has answered a ping sent
// at or after since: the tier has applied every invalidation sent before
// then. It says nothing of the readers: see readersAfter.
func (t *Tracker) heardAfter(since int64) bool {
	p := t.heard.Load()
	if p == nil {
		return false
	}
	for i := range *p {
		if (*p)[i].Load() < since {
			return false
		}
	}
	return true
}

// errReplaced ends a session whose connection go-redis replaced.
var errReplaced = errors.New("near: tracking connection replaced")

// beat pings ps every d (Config.Beat), and when asked is announced (see
// Tracker.Sync; ask is the first announcement to wait for, see every),
// until ctx ends, each ping carrying the Now() at which it was sent (see
// Tracker.Heard). A failed ping closes ps, which ends the session: go-redis
// replaces the connection of a PubSub whose write failed, and the session
// must not read on from the new one as if nothing had been lost in
// between.
func beat(ctx context.Context, ps *redis.PubSub, asked *news, ask <-chan struct{}, d time.Duration) {
	every(ctx, d, asked, ask, func(bool) bool {
		if err := ps.Ping(ctx, strconv.FormatInt(Now(), 10)); err != nil {
			_ = ps.Close()
			return false
		}
		return true
	})
}

// every calls f every d, and when asked is announced (asked true), until
// ctx ends or f returns false: the beats of the subscriber and of the
// readers. ask is asked.wait(), taken by the caller before it started the
// goroutine and before sending anything on the connection whose answers
// heardAfter or readersAfter count: an ask announced after such an answer
// but before the goroutine ran is not lost (a loaded machine may leave the
// goroutine unscheduled that long; a Sync would wait for an answer that
// never comes, then empty the tier).
func every(ctx context.Context, d time.Duration, asked *news, ask <-chan struct{}, f func(asked bool) bool) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		now := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			select { // both may be ready: the ask must not be lost
			case <-ask:
				now = true
			default:
			}
		case <-ask:
			now = true
		}
		ask = asked.wait() // before f: an ask during f is for after it
		if !f(now) {
			return
		}
	}
}

// sessionOptions are o for a session's own clients: RESP2, one
// connection, reads and writes bounded by ping (Config.Ping).
func sessionOptions(o *redis.Options, ping time.Duration) *redis.Options {
	opt := *o
	opt.Protocol = 2
	// Not the client's config, which it changes under its own lock after a
	// handshake; RESP2 has no maintenance notifications anyway.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 1, 1
	// A beat's write holds the PubSub's lock, and Close waits for it: never
	// unbounded (-1), nor longer than a silent connection is given.
	if opt.WriteTimeout <= 0 || opt.WriteTimeout > ping {
		opt.WriteTimeout = ping
	}
	// Nor may a handshake wait unbounded on a frozen server (the
	// subscriber's own reads set their timeout): it would hold up Close.
	if opt.ReadTimeout <= 0 || opt.ReadTimeout > ping {
		opt.ReadTimeout = ping
	}
	return &opt
}

// trackingOptions are o for the subscriber's client (see sessionOptions),
// whose connection records its id and turns tracking on, redirected to
// itself: it reads nothing (the readers do, reporting to it), and the
// command only proves that the server allows tracking. A server's refusal
// is recorded in refused (a network error is not one).
func trackingOptions(o *redis.Options, ping time.Duration, refused *refused, self *atomic.Int64) *redis.Options {
	opt := sessionOptions(o, ping)
	user := o.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if user != nil {
			if err := user(ctx, cn); err != nil {
				return err
			}
		}
		id, err := cn.ClientID(ctx).Result()
		if err == nil {
			self.Store(id)
			err = cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", id).Err()
		}
		if refusal(err) {
			refused.record(err)
		}
		return err
	}
	return opt
}

// refused holds the first lasting refusal of tracking by a server of a
// Tracker's run (see refusal), and closes done when it is recorded.
type refused struct {
	err  atomic.Pointer[error]
	done chan struct{}
}

func newRefused() *refused { return &refused{done: make(chan struct{})} }

// record records err, unless a refusal was recorded before.
func (r *refused) record(err error) {
	if r.err.CompareAndSwap(nil, &err) {
		close(r.done)
	}
}

// refusal reports whether err is the server refusing tracking for good:
// no permission (an ACL user without the command or the channel), or a
// server that does not know the command, subcommand or option (Redis
// before 6, miniredis). Every other error (the network, a script running,
// loading, a failover, too many clients, out of memory, a password being
// rotated) may pass, and the session is tried again: turning the tier off
// is for the Cache's life.
func refusal(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	for _, lasting := range []string{"noperm", "err unknown command", "err unknown subcommand", "err syntax error", "err wrong number of arguments"} {
		if strings.HasPrefix(msg, lasting) {
			return true
		}
	}
	return false
}
