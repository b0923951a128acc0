package dogpile

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// WithNearCache keeps up to maxEntries decoded values in process memory, in
// front of Redis: a Fetch of a key read moments ago returns without a round
// trip. The near tier stays coherent with Redis across the fleet through
// Redis's server-assisted invalidation (CLIENT TRACKING in broadcast mode
// on the Cache's prefix): any write of a key, by this process, by another
// dogpile process, by redis-cli or by any other client, and its expiry or
// eviction too, removes the local copy when Redis's invalidation message
// arrives (well under a millisecond on a LAN; Set and Delete of this Cache
// remove it at once). After an invalidation of a key arrives, no Fetch in
// this process returns the value it replaced.
//
// A local copy is served only while the connection that carries the
// invalidations is known to be up. Each Cache with WithNearCache holds one
// such connection per Redis server (per master on a Cluster), opened at its
// first Fetch and closed after a minute without one. When that connection
// drops (killed, network, failover), or goes a few seconds without
// answering a ping, the near tier is emptied and bypassed until tracking is
// in place again. On a Cluster, the tracker asks for the masters every
// second and follows a failover: the tier is emptied, and tracking moves
// to the new masters (a demoted master still reports the writes it
// replicates meanwhile). A local copy never outlives the key's TTL in Redis (read
// with the value, in the same round trip), nor the moment the value turns
// stale or due for an early refresh (see [WithStale], [WithEarlyRefresh]):
// from then on Fetch reads Redis, as without a near tier.
//
// Where Redis cannot track keys (a server older than 6.0, miniredis, a
// server that refuses CLIENT TRACKING) or the client is of a kind the near
// tier does not follow (a Ring, a failover client, a Cluster client that
// reads from replicas), Fetch reads Redis as usual and never serves an
// unverifiable local copy; the Cache says so once, through [WithLogger] if
// set, and in [Stats].NearOff.
//
// Callers that hit the near tier share one decoded value: treat values as
// read-only (a Fetch answered by Redis still returns a fresh copy). Only
// Fetch uses the near tier; Get always reads Redis. Near hits are counted
// in [Stats].Hits and [Stats].NearHits, and reported as [EventHit] events
// with Near set. WithNearCache panics if maxEntries is not positive.
func WithNearCache(maxEntries int) Option {
	if maxEntries <= 0 {
		panic(fmt.Sprintf("dogpile: near cache size %d is not positive (a programmer error)", maxEntries))
	}
	return optionFunc(func(o *options) { o.nearEntries = maxEntries })
}

// nearStripes is how many generation counters the near tier keeps: an
// invalidation of a key bumps the one its value key hashes to.
const nearStripes = 256

// A nearEntry is one decoded value in the near tier.
type nearEntry[T any] struct {
	v        T
	notFound bool  // a not-found tombstone (see WithNegativeTTL)
	until    int64 // served while nearNow() < until
}

// near is a Cache's near tier: the bounded store of decoded values, keyed
// by value key, and the coherence state shared with its tracker.
type near[T any] struct {
	store *otter.Cache[string, nearEntry[T]]
	x     nearIndex
	t     *tracker
}

// nearIndex is the coherence state of a near tier. Reads of the store take
// no lock; inserts, invalidations and flushes are ordered by mu, so that a
// read that started before an invalidation (or a flush) cannot store the
// value it read after that invalidation removed the key: the insert sees
// that the key's generation (or the epoch) moved since its ticket.
type nearIndex struct {
	mu    sync.Mutex
	epoch atomic.Uint64 // odd while tracking is up; bumped at every change
	gens  [nearStripes]atomic.Uint64
	seed  maphash.Seed

	remove func(vk string) // drops a key from the store
	purge  func()          // empties the store
	// notify, if set, reports an invalidation from Redis of vk (or, with
	// "", of every key), after mu is released: it calls the observer.
	notify func(vk string)

	invalidations, flushes atomic.Uint64
}

// A nearTicket is taken before a read from Redis; the value read may enter
// the near tier only if nothing invalidated its key since.
type nearTicket struct {
	epoch, gen uint64
	at         int64 // nearNow() when the read started
}

// nearBase is the origin of nearNow: a monotonic clock in nanoseconds.
var nearBase = time.Now()

func nearNow() int64 { return int64(time.Since(nearBase)) }

func newNear[T any](c *Cache[T]) *near[T] {
	store := otter.Must(&otter.Options[string, nearEntry[T]]{
		MaximumSize: c.opts.nearEntries,
		// Maintenance runs on the goroutine that writes: no goroutine of the
		// store's own outlives the Cache, and the bound holds after each write.
		Executor: func(fn func()) { fn() },
	})
	n := &near[T]{store: store}
	n.x.seed = maphash.MakeSeed()
	n.x.remove = func(vk string) { store.Invalidate(vk) }
	n.x.purge = store.InvalidateAll
	n.t = newTracker(c.client, c.opts.prefix, &n.x, c.nearOff)
	if c.opts.observer != nil {
		n.x.notify = func(vk string) {
			c.emit(context.Background(), Event{Kind: EventInvalidate, Key: c.nearKey(vk)})
		}
	}
	return n
}

// nearKey is the key whose value key is vk, or vk itself for a key stored
// under a hash of its name (see redisutil.Tag): "" stays "".
func (c *Cache[T]) nearKey(vk string) string {
	rest, ok := strings.CutPrefix(vk, c.opts.prefix)
	if name, plain := strings.CutSuffix(rest, "}"); ok && plain && strings.HasPrefix(name, "{") {
		return name[1:]
	}
	return vk
}

func (x *nearIndex) stripe(vk string) *atomic.Uint64 {
	return &x.gens[maphash.String(x.seed, vk)%nearStripes]
}

// up reports whether tracking is in place, so local values may be served.
func (x *nearIndex) up() bool { return x.epoch.Load()%2 == 1 }

func (x *nearIndex) ticket(vk string) nearTicket {
	return nearTicket{epoch: x.epoch.Load(), gen: x.stripe(vk).Load(), at: nearNow()}
}

// admit runs put if tk is still good: tracking was up when it was taken and
// has not dropped since, and no invalidation of vk's stripe came meanwhile.
func (x *nearIndex) admit(vk string, tk nearTicket, put func()) {
	if tk.epoch%2 == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.epoch.Load() == tk.epoch && x.stripe(vk).Load() == tk.gen {
		put()
	}
}

// invalidate removes the keys from the near tier (Redis wrote them).
func (x *nearIndex) invalidate(keys []string) {
	x.mu.Lock()
	n := 0
	for _, k := range keys {
		if !isValueKey(k) {
			continue // a lock, an error list, a retry mark: not in the tier
		}
		x.invalidations.Add(1)
		x.drop(k)
		keys[n] = k
		n++
	}
	x.mu.Unlock()
	if x.notify != nil {
		for _, k := range keys[:n] {
			x.notify(k)
		}
	}
}

// drop removes vk and fails the tickets of reads of it in flight. x.mu is
// held.
func (x *nearIndex) drop(vk string) {
	x.stripe(vk).Add(1)
	x.remove(vk)
}

// setUp records that tracking is in place (up) or lost; either way the
// store is emptied: what it held could not be verified across the change.
func (x *nearIndex) setUp(up bool) {
	x.mu.Lock()
	if x.up() == up {
		x.mu.Unlock()
		return
	}
	x.epoch.Add(1)
	x.purge()
	x.mu.Unlock()
	if !up {
		x.flushed()
	}
}

// flush empties the store, tracking staying up (Redis said FLUSHALL).
func (x *nearIndex) flush() {
	x.mu.Lock()
	x.epoch.Add(2)
	x.purge()
	x.mu.Unlock()
	x.flushed()
}

// flushed counts and reports a flush of the whole store.
func (x *nearIndex) flushed() {
	x.flushes.Add(1)
	if x.notify != nil {
		x.notify("")
	}
}

// isValueKey tells a value key (see valueKey: it ends with its hash tag,
// hashed or not) from the other keys of a cache key, which add a suffix.
func isValueKey(k string) bool {
	return len(k) > 0 && (k[len(k)-1] == '}' || k[len(k)-1] == '#')
}

// nearHit answers Fetch from the near tier, if it holds a live value for
// vk and tracking is up.
func (c *Cache[T]) nearHit(ctx context.Context, key, vk string) (v T, err error, ok bool) {
	n := c.near
	now := nearNow()
	n.t.use(now)
	if !n.x.up() {
		return v, nil, false
	}
	e, ok := n.store.GetIfPresent(vk)
	if !ok || now >= e.until {
		return v, nil, false
	}
	c.emit(ctx, Event{Kind: EventHit, Key: key, Near: true})
	if e.notFound {
		return v, notFound(key), true
	}
	return e.v, nil, true
}

// nearTicket is taken before Fetch reads vk from Redis.
func (c *Cache[T]) nearTicket(vk string) nearTicket {
	if c.near == nil {
		return nearTicket{}
	}
	return c.near.x.ticket(vk)
}

// nearPut stores a value read from Redis with its PTTL in the near tier,
// for as long as Redis serves it fresh: up to its expiry, less the stale
// window and the early-refresh gap, past which Fetch must see Redis.
func (c *Cache[T]) nearPut(vk string, tk nearTicket, b []byte, m meta, pttl time.Duration) {
	if c.near == nil || pttl <= 0 {
		return // a key without a TTL is no dogpile value
	}
	life := pttl - c.opts.stale
	if c.opts.beta > 0 && !m.notFound {
		life -= m.early
	}
	if life <= 0 {
		return
	}
	if !c.near.t.tracked(vk) {
		return // a Cluster's master this process does not track (yet)
	}
	// The tier keeps a decode of its own: the caller that read b got the
	// other one and may change it (a map, a slice), as Fetch allows.
	v, _, err := c.decodeEntry(b)
	if err != nil {
		return
	}
	e := nearEntry[T]{v: v, notFound: m.notFound, until: tk.at + int64(life)}
	c.near.x.admit(vk, tk, func() { c.near.store.Set(vk, e) })
}

// nearForget removes vk after this process wrote it (Set, Delete), before
// Redis's invalidation arrives: this process reads its own writes.
func (c *Cache[T]) nearForget(vk string) {
	if c.near == nil {
		return
	}
	x := &c.near.x
	x.mu.Lock()
	defer x.mu.Unlock()
	x.drop(vk)
}

// nearOff records that the near tier cannot work here, and says so once.
func (c *Cache[T]) nearOff(reason string) {
	if c.stats.nearOff.Swap(true) {
		return
	}
	if l := c.opts.logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, "dogpile: near cache off; every Fetch reads redis",
			slog.String("prefix", c.opts.prefix), slog.String("reason", reason))
	}
}
