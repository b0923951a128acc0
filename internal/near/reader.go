package near

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Reading through tracked connections.
//
// In the default tracking mode, Redis remembers, per key, the connections
// that read it, and reports a write of the key only to them (here
// redirected to the session's subscriber): a write costs one message per
// process that holds the key, not one per process with a near tier (as in
// broadcast mode, which dogpile used before). The price is twofold. A
// value may enter the tier only if it was read on a tracked connection;
// and it stays covered only while that connection lives, for Redis
// reports the keys a closed connection read to nobody. So each session
// holds a few readers of its own (Config.Readers), each one
// connection for its whole life (a *redis.Conn never reconnects on its
// own), pinged like the subscriber, and each value in the tier names the
// reader it came from: its Owner. A reader whose connection fails is
// replaced by a new one, a new Owner; the values of the old one are no
// longer served.

// An Owner stands for one connection of a reader: the values read through
// it are covered by tracking while it lives and answers.
type Owner struct {
	dead  atomic.Bool
	heard atomic.Int64 // Now() at which the latest command it answered was sent
	lag   int64        // the Tracker's MaxLag
}

// Live reports whether values read through o may be served at now: its
// connection has not failed, and it answered a command sent at most MaxLag
// before now. A connection Redis closed without telling (a CLIENT KILL, the
// server's idle timeout) no longer answers, so its values stop being served
// within MaxLag, before a write that returned more than MaxLag ago could
// have gone unreported.
func (o *Owner) Live(now int64) bool {
	return !o.dead.Load() && now-o.heard.Load() <= o.lag
}

// readersAfter reports whether every reader whose values the tier may
// serve has answered a command sent at or after since, or is known dead:
// Redis still tracked what it read then, so every invalidation of it sent
// before since went to the subscriber. A reader's connection that Redis
// closed without a word (a CLIENT KILL, a network failure) loses its
// tracking at once, and the tier learns it only at its next ping.
func (t *Tracker) readersAfter(since int64) bool {
	t.rmu.RLock()
	defer t.rmu.RUnlock()
	for _, rd := range t.readers {
		for _, r := range rd.rs {
			if o := r.owner.Load(); o != nil && !o.dead.Load() && o.heard.Load() < since {
				return false
			}
		}
	}
	return true
}

// A reader is one tracked connection of a session, of a client of its own
// (a connection of the Cache's client's pool, held for good, would starve
// a small pool; and closing its client ends a command in flight at once),
// used by one command (or pipeline) at a time.
type reader struct {
	mu     sync.Mutex
	node   *redis.Client // the session's readers' client
	id     int64         // the subscriber's connection
	conn   *redis.Conn   // nil until used, or after it failed
	owner  atomic.Pointer[Owner]
	closed atomic.Bool   // the session ended
	lag    time.Duration // the Tracker's MaxLag
}

// do runs f on r's connection, opening one if needed, and returns the
// Owner of what f read. An error other than a reply from the server (the
// network, a timeout, a cancelled context) may have broken the connection:
// it is closed and its Owner dies. r.mu is held.
func (r *reader) do(ctx context.Context, f func(redis.Cmdable) error) (*Owner, error) {
	if r.closed.Load() {
		return nil, errReaderClosed
	}
	if r.conn == nil {
		if err := r.open(ctx); err != nil {
			return nil, err
		}
	}
	o := r.owner.Load()
	sent := Now()
	err := f(r.conn)
	if (err != nil && !IsReply(err)) || r.closed.Load() {
		r.drop()
		return nil, err
	}
	if sent > o.heard.Load() {
		o.heard.Store(sent)
	}
	return o, err
}

// open takes a connection of its own from the readers' pool (discarded
// when closed: it tracks) and turns tracking on, reported to the
// subscriber.
//
// The new Owner has answered the command that turned its tracking on:
// Redis tracks what it reads from then on, so it counts as answered for
// every Sync that began before that command was sent (readersAfter). With
// heard 0 instead, a Sync that found it opened after the reader's asked
// ping (which found no connection, the previous one having failed) would
// wait for an answer nobody is asked for, then empty the tier.
func (r *reader) open(ctx context.Context) error {
	cn := r.node.EphemeralConn()
	sent := Now()
	if err := cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", r.id).Err(); err != nil {
		_ = cn.Close()
		return err
	}
	r.conn = cn
	o := &Owner{lag: int64(r.lag)}
	o.heard.Store(sent)
	r.owner.Store(o)
	return nil
}

// drop closes r's connection, whose values are no longer served. r.mu is
// held.
func (r *reader) drop() {
	r.owner.Load().dead.Store(true)
	_ = r.conn.Close()
	r.conn = nil
}

var errReaderClosed = errors.New("near: the tracking session ended")

// IsReply reports whether err is a reply from the server (redis.Nil
// included), not a failure of the connection or the caller's context.
// Checked for nil first: the target of errors.As escapes, and a read
// without error must not pay for it.
func IsReply(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	return errors.As(err, &reply)
}

// end closes r for good: its values are no longer served from now on, and
// its connection closes now, or when the command in flight returns.
func (r *reader) end() {
	r.closed.Store(true)
	if o := r.owner.Load(); o != nil {
		o.dead.Store(true)
	}
	if r.mu.TryLock() {
		if r.conn != nil {
			r.drop()
		}
		r.mu.Unlock()
	}
}

// beat pings r every MaxLag/2 while it is idle (a command in flight
// answers for it), and when asked is announced (see Tracker.Sync): then
// after the command in flight, if any. It announces answered at each
// answer, and after each asked ping, answered or not (a reader that failed
// is dead, which readersAfter counts as done). Its beat is slower than the
// subscriber's (Config.Beat), for a reader's answer need only prove it alive, not
// that the messages sent before it were delivered, and each ping costs
// Redis CPU in every process (see bench/README, "Near tiers across a
// fleet").
func (r *reader) beat(ctx context.Context, asked *news, ask <-chan struct{}, answered *news) {
	every(ctx, r.lag/2, asked, ask, func(now bool) bool {
		if r.ping(ctx, now) || now {
			answered.announce()
		}
		return true
	})
}

// ping pings r's connection if it has one, and reports whether it
// answered. Unless after is set it pings only an idle connection: a
// command in flight answers for it. With after, it waits for that command,
// which may have been sent before the ping was asked for, and pings after
// it.
func (r *reader) ping(ctx context.Context, after bool) bool {
	if after {
		r.mu.Lock()
	} else if !r.mu.TryLock() {
		return false
	}
	defer r.mu.Unlock()
	if r.conn == nil {
		return false
	}
	_, err := r.do(ctx, func(cn redis.Cmdable) error { return cn.Ping(ctx).Err() })
	return err == nil
}

// readers are a session's readers on one node.
type readers struct {
	rs   []*reader
	next atomic.Uint32 // where the search for a free one starts
}

// startReaders starts t's readers of a session on the node o, whose
// subscriber is the connection id; t.ReaderHook, if not nil, is added to
// their client. They run until stop.
func (t *Tracker) startReaders(o *redis.Options, id int64) (rd *readers, stop func()) {
	n := max(t.cfg.Readers, 0)
	cl := redis.NewClient(readerOptions(o, n, t.cfg.Ping))
	if t.ReaderHook != nil {
		cl.AddHook(t.ReaderHook)
	}
	rd = &readers{rs: make([]*reader, n)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Taken before the readers can open (see every): an ask after any of
	// their answers reaches their beats, however late these start.
	ask := t.asked.wait()
	for i := range rd.rs {
		r := &reader{node: cl, id: id, lag: t.cfg.MaxLag}
		rd.rs[i] = r
		wg.Go(func() {
			if t.beforeBeat != nil {
				t.beforeBeat(ctx, true)
			}
			r.beat(ctx, &t.asked, ask, &t.answered)
		})
	}
	return rd, func() {
		for _, r := range rd.rs {
			r.end()
		}
		cancel()
		_ = cl.Close() // a command in flight fails now
		wg.Wait()
	}
}

// readerOptions are o for the readers' client: a connection per reader
// (n), RESP2 (no push messages on a connection that reads values), writes
// bounded as the subscriber's are (by ping), and o's read timeout for the
// values it reads, go-redis's default where o has none (Close ends a read
// in flight anyway).
func readerOptions(o *redis.Options, n int, ping time.Duration) *redis.Options {
	opt := sessionOptions(o, ping)
	opt.PoolSize, opt.MaxIdleConns, opt.MaxActiveConns = n, n, n
	opt.ReadTimeout = max(o.ReadTimeout, 0)
	return opt
}

// try runs f on a free reader, if any (ok), and returns the Owner of what
// f read (nil if its connection failed).
func (rd *readers) try(ctx context.Context, f func(redis.Cmdable) error) (o *Owner, err error, ok bool) {
	n := uint32(len(rd.rs))
	start := rd.next.Add(1)
	for i := range n {
		r := rd.rs[(start+i)%n]
		if r.mu.TryLock() {
			o, err = r.do(ctx, f)
			r.mu.Unlock()
			return o, err, true
		}
	}
	return nil, nil, false
}
