// Package wake delivers Redis pub/sub wake-ups to goroutines waiting for a
// lock or a value. All waiters of one client share one subscription
// connection (one per master on a cluster, using sharded pub/sub; one per
// shard on a ring), so a thousand waiters cost one connection, not a
// thousand.
//
// A wake-up is only a hint: pub/sub is fire-and-forget, and a message sent
// while the connection is down is lost. Callers must bound every wait (by the
// holder's remaining TTL) and re-check the state in Redis after each wake-up.
package wake

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// PublishCommand returns the command a script must use to publish a wake-up
// for a client of this type: SPUBLISH on a cluster, where the channel must
// share the hash slot of the keys the script touches, PUBLISH otherwise.
func PublishCommand(c redis.UniversalClient) string {
	if _, ok := c.(*redis.ClusterClient); ok {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// Wake-up payloads. The scripts that publish them build their Lua
// literals from these names, so this table is their one home. One wakes a
// single waiter per process, the longest waiting, as sync.Cond.Signal; any
// other payload wakes every waiter, as Broadcast.
//
//	name      payload  published by                                     means to a waiter
//	Stored    "v"      the cache's store of a computed value, and Set   look again; a store appends
//	                                                                    token:value when it is small
//	Failed    "e"      the cache's store of a compute's failure         the awaited compute failed
//	Released  "r"      the cache's release of a lock without a value    look again (take over)
//	Deleted   "d"      the cache's Delete                               look again (compute afresh)
//	One       "1"      a lock release that one waiter can use           try to acquire
//	All       "all"    a release that every waiter can use (RWMutex)    try to acquire
const (
	Stored   = "v" // see StoredValue
	Failed   = "e"
	Released = "r"
	Deleted  = "d"
	One      = "1"
	All      = "all"
)

// StoredValue reads a Stored payload that carries the value it announces,
// Stored+token+":"+value as the cache's store script publishes it: the
// storing holder's token and the value. ok is false for any other payload,
// a plain Stored included.
func StoredValue(payload string) (token, value string, ok bool) {
	rest, ok := strings.CutPrefix(payload, Stored)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, ":")
}

// readyTimeout bounds how long Subscribe waits for the server to confirm a
// subscription. Past it the waiter goes on without push, polling instead.
const readyTimeout = 2 * time.Second

// A Sub is one waiter's interest in one channel.
type Sub struct {
	h       *hub
	ch      string
	c       chan struct{}
	payload string // guarded by h.mu; see Payload
	closed  atomic.Bool
}

// Subscribe registers interest in channel and returns once the server has
// confirmed the subscription, so that a message published after Subscribe
// returns reaches [Sub.Wake] unless the connection drops. On error the
// caller should fall back to polling; the returned Sub is then nil.
func Subscribe(ctx context.Context, c redis.UniversalClient, channel string) (*Sub, error) {
	h, err := acquireHub(ctx, c, channel)
	if err != nil {
		return nil, err
	}
	s := &Sub{h: h, ch: channel, c: make(chan struct{}, 1)}
	ready, err := h.add(ctx, s)
	if err != nil {
		s.Close()
		return nil, err
	}
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	case <-t.C:
		s.Close()
		return nil, errNotConfirmed
	}
}

// Wake returns a channel that receives a value after a message was published
// on the Sub's channel (or the connection had trouble, so the state must be
// looked at again). It is nil for a nil Sub, which blocks forever in a select.
func (s *Sub) Wake() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.c
}

// Payload returns the payload of the latest message that woke s, or "" if
// none did, or if s was woken by connection trouble (or by a wake-up passed
// on from a Sub that left) since. Read it after a receive from [Sub.Wake]:
// a later message may have replaced it, never an earlier one.
func (s *Sub) Payload() string {
	if s == nil {
		return ""
	}
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.payload
}

// Close ends the subscription. The last Close on a connection closes it.
// Close on a nil or closed Sub does nothing.
func (s *Sub) Close() {
	if s == nil || !s.closed.CompareAndSwap(false, true) {
		return
	}
	s.h.remove(s)
	releaseHub(s.h)
}

// Waiting returns how many Subs of this process wait on channel through
// client. It does no I/O.
func Waiting(c redis.UniversalClient, channel string) int {
	if waiting.Load() == 0 {
		return 0 // the common case, on every uncontended acquire: no lock
	}
	hubsMu.Lock()
	defer hubsMu.Unlock()
	n := 0
	for k, h := range hubs {
		if k.client != c {
			continue
		}
		h.mu.Lock()
		if e := h.chans[channel]; e != nil {
			n += len(e.subs)
		}
		h.mu.Unlock()
	}
	return n
}

type errString string

func (e errString) Error() string { return string(e) }

const errNotConfirmed = errString("wake: subscription not confirmed in time")

type hubKey struct {
	client redis.UniversalClient
	node   string // master address on a cluster, shard address on a ring, "" otherwise
}

var (
	hubsMu sync.Mutex
	hubs   = map[hubKey]*hub{}

	waiting atomic.Int64 // Subs of all hubs, so Waiting can skip hubsMu
)

// A hub owns one pub/sub connection and fans its messages out to Subs.
type hub struct {
	key     hubKey
	ps      *redis.PubSub
	sharded bool
	refs    int           // guarded by hubsMu
	idle    *time.Timer   // guarded by hubsMu; closes the hub after linger
	quit    chan struct{} // closed when the last Sub leaves

	// io is a token held during each SUBSCRIBE or UNSUBSCRIBE on ps, so
	// that they reach the server in the order they were decided (see
	// channels.go), without holding mu over a network call.
	io chan struct{}

	mu     sync.Mutex
	closed bool
	chans  map[string]*entry
}

type entry struct {
	subs  []*Sub        // in arrival order: wake-one serves the longest waiter
	ready chan struct{} // closed when the server confirmed the subscription
}

func acquireHub(ctx context.Context, c redis.UniversalClient, channel string) (*hub, error) {
	key := hubKey{client: c}
	// On a Cluster, sharded pub/sub lives on the master that owns the
	// channel's slot: one plain connection per master carries every
	// channel it owns. A Ring has no connection of its own to subscribe on
	// (Subscribe without a channel panics): a script publishes on the
	// shard that owns its keys, which is the shard of the channel's hash
	// tag, so one connection per shard carries every channel it owns.
	node, err := redisutil.NodeOf(ctx, c, channel)
	if err != nil {
		return nil, err
	}
	_, sharded := c.(*redis.ClusterClient)
	if node != nil {
		key.node = node.Options().Addr
	}
	hubsMu.Lock()
	defer hubsMu.Unlock()
	h := hubs[key]
	if h == nil {
		h = &hub{key: key, chans: map[string]*entry{}, quit: make(chan struct{}), io: make(chan struct{}, 1), sharded: sharded}
		switch {
		case sharded:
			h.ps = node.SSubscribe(context.Background())
		case node != nil:
			h.ps = node.Subscribe(context.Background())
		default:
			h.ps = c.Subscribe(context.Background())
		}
		hubs[key] = h
		go h.loop()
	}
	if h.refs == 0 && h.idle != nil {
		h.idle.Stop() // if it fired already, it sees refs > 0 and keeps h
	}
	h.refs++
	return h, nil
}

// linger is how long an idle connection stays open for the next waiter: a
// busy process reuses it instead of dialling and subscribing per wait. It
// is short so that an idle process (or a test binary at exit) holds nothing.
const linger = 250 * time.Millisecond

func releaseHub(h *hub) {
	hubsMu.Lock()
	defer hubsMu.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	if h.idle != nil {
		h.idle.Stop()
	}
	h.idle = time.AfterFunc(linger, func() {
		hubsMu.Lock()
		if h.refs > 0 || hubs[h.key] != h {
			hubsMu.Unlock()
			return // a new waiter came along
		}
		delete(hubs, h.key)
		hubsMu.Unlock()
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		close(h.quit)
		_ = h.ps.Close() // ends loop: its blocked Receive fails
	})
}

func (h *hub) loop() {
	backoff := 10 * time.Millisecond
	for {
		msg, err := h.ps.Receive(context.Background())
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		if err != nil {
			// The connection broke (go-redis reconnects and resubscribes on
			// the next Receive). Messages may have been lost: wake everyone
			// to look again rather than sleep out a whole lease.
			for _, e := range h.chans {
				e.wakeAll("")
			}
			h.mu.Unlock()
			select {
			case <-h.quit:
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			switch e := h.chans[m.Channel]; {
			case e == nil:
			case m.Payload == One:
				e.wakeOne(m.Payload)
			default:
				e.wakeAll(m.Payload)
			}
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				if e := h.chans[m.Channel]; e != nil {
					e.confirm()
				}
			}
		}
		h.mu.Unlock()
	}
}

func (e *entry) confirm() {
	select {
	case <-e.ready:
	default:
		close(e.ready)
	}
}

// wakeOne wakes the longest waiter that has no wake-up pending, with
// payload. The hub's mu is held.
func (e *entry) wakeOne(payload string) {
	for _, s := range e.subs {
		select {
		case s.c <- struct{}{}:
			s.payload = payload
			return
		default:
		}
	}
}

// wakeAll wakes every waiter with payload; one with a wake-up pending
// keeps it and sees the newer payload. The hub's mu is held.
func (e *entry) wakeAll(payload string) {
	for _, s := range e.subs {
		s.payload = payload
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}
