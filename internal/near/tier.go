package near

import (
	"context"
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/entry"
)

// An Entry is one decoded value in a Tier. Every near hit copies one: Sum
// sits in NotFound's padding, so that the checks of sampled hits make it
// no larger, on or off.
type Entry[T any] struct {
	V        T
	NotFound bool   // a not-found tombstone
	Sum      uint32 // with Sums, the sum of its bytes (see Tier.Sum); else 0
	Until    int64  // served while Now() < Until
	Down     int64  // its expiry in Redis: kept and served until then while Redis is down (see Handlers.Keep)
	Owner    *Owner
}

// A TierConfig is what a Tier takes of its cache's options.
type TierConfig struct {
	Entries int           // the store's bound
	Stale   time.Duration // the cache's stale window: a copy is served only while its value is fresh
	Early   bool          // entries carry an early-refresh gap (entry.Meta.Early), which shortens a copy's life too
	Sums    bool          // keep the sum of each entry's bytes, for the checks of sampled hits
	Keep    bool          // keep the copies when tracking is lost, for DownHit (see Handlers.Keep)
	Config                // the tracker's timings and connections
}

// A Tier is a cache's near tier: the bounded store of decoded values, keyed
// by value key, its Index and its Tracker. A nil *Tier is a cache without
// one: every method is then a no-op (or says "not held"), so callers need
// no check of their own.
type Tier[T any] struct {
	store *otter.Cache[string, Entry[T]]
	x     *Index
	t     *Tracker
	// b is the client's breaker; keptAt, its Closings when tracking was
	// lost and the store kept (see Handlers.Keep and DownHit).
	b      *breaker.Breaker
	keptAt atomic.Uint64
	late   atomic.Uint64 // hits turned away for a late answer (see Late)
	seed   maphash.Seed  // keys the sums of entries (see Sum)
	cfg    TierConfig
	decode func(b []byte) (T, entry.Meta, error)
}

// NewTier builds the near tier of a cache on client, whose breaker is b,
// which decodes with decode. h's Forget and Notify are the cache's; the
// tier sets Remove, Purge and, with cfg.Keep, Keep. off is called when the
// tier cannot work on this client.
func NewTier[T any](client redis.UniversalClient, b *breaker.Breaker, cfg TierConfig, decode func([]byte) (T, entry.Meta, error),
	h Handlers, off func(reason string)) *Tier[T] {
	store := otter.Must(&otter.Options[string, Entry[T]]{
		MaximumSize: cfg.Entries,
		// Maintenance runs on the goroutine that writes: no goroutine of the
		// store's own outlives the cache, and the bound holds after each write.
		Executor: func(fn func()) { fn() },
	})
	n := &Tier[T]{store: store, b: b, cfg: cfg, decode: decode, seed: maphash.MakeSeed()}
	h.Remove = func(vk string) { store.Invalidate(vk) }
	h.Purge = store.InvalidateAll
	if cfg.Keep {
		h.Keep = func() { n.keptAt.Store(b.Closings()) }
	}
	n.x = NewIndex(h)
	n.t = NewTracker(client, n.x, off, cfg.Config)
	return n
}

// Hit returns the tier's value for vk, and whether it is a not-found
// tombstone, if the tier holds a live one and tracking is up.
func (n *Tier[T]) Hit(vk string) (v T, notFound, ok bool) {
	if n == nil {
		return v, false, false
	}
	now := Now()
	n.t.Use(now)
	if !n.x.Up() {
		return v, false, false
	}
	if !n.t.Heard(now) {
		n.late.Add(1) // a slow network or a stalled server: Redis answers
		return v, false, false
	}
	e, ok := n.store.GetIfPresent(vk)
	if !ok || now >= e.Until {
		return v, false, false
	}
	if !e.Owner.Live(now) {
		n.late.Add(1) // its reader failed, or answers late
		return v, false, false
	}
	return e.V, e.NotFound, true
}

// Heard reports whether a Fetch may join a flight of its process: unless
// the tier's tracking is in place and has not proven itself within
// MaxLag. Without tracking in place (no tier, or off, or Redis down)
// nothing of other processes' writes is heard anyway, as in a cache
// without a tier: flights are shared as they are there.
func (n *Tier[T]) Heard() bool {
	return n == nil || !n.x.Up() || n.t.Heard(Now())
}

// Tracking reports whether the tier's tracking is in place: a read on a
// connection it does not track must then be a flight no later caller
// joins (the flights of a time without tracking are forgotten when it
// comes back, see Index.setUp).
func (n *Tier[T]) Tracking() bool { return n != nil && n.x.Up() }

// Ticket is taken before a Fetch reads vk from Redis.
func (n *Tier[T]) Ticket(vk string) Ticket {
	if n == nil {
		return Ticket{}
	}
	return n.x.Ticket(vk)
}

// Good reports whether a value of vk read with ticket tk may still enter.
func (n *Tier[T]) Good(vk string, tk Ticket) bool { return n.x.Good(vk, tk) }

// Put stores a value read from Redis with its PTTL, for as long as Redis
// serves it fresh: up to its expiry, less the stale window and the
// early-refresh gap, past which a Fetch must see Redis. A value that may
// not enter (read on no tracked connection, o nil; without a TTL; already
// past that point) removes an older copy, as a refused one does (see
// Index.Admit).
func (n *Tier[T]) Put(vk string, tk Ticket, o *Owner, b []byte, m entry.Meta, pttl time.Duration) {
	if n != nil {
		n.x.Admit(vk, tk, n.admit(vk, o, tk, b, m, pttl))
	}
}

// admit returns the put of a value read from Redis into the tier, or nil
// if it may not enter (see Put).
func (n *Tier[T]) admit(vk string, o *Owner, tk Ticket, b []byte, m entry.Meta, pttl time.Duration) func() {
	if o == nil || pttl <= 0 { // a key without a TTL is no dogpile value
		return nil
	}
	life := pttl - n.cfg.Stale
	if n.cfg.Early && !m.NotFound {
		life -= m.Early
	}
	if life <= 0 {
		return nil
	}
	// The tier keeps a decode of its own: the caller that read b got the
	// other one and may change it (a map, a slice), as Fetch allows.
	v, _, err := n.decode(b)
	if err != nil {
		return nil
	}
	e := Entry[T]{V: v, NotFound: m.NotFound, Until: tk.At + int64(life), Down: tk.At + int64(pttl), Owner: o}
	if n.cfg.Sums {
		e.Sum = n.Sum(b)
	}
	return func() { n.store.Set(vk, e) }
}

// Forget removes vk after this process wrote it (Set, Delete), before
// Redis's invalidation arrives: the process reads its own writes.
func (n *Tier[T]) Forget(vk string) {
	if n != nil {
		n.x.Drop(vk)
	}
}

// ForgetAll empties the tier after this process cleared the cache.
func (n *Tier[T]) ForgetAll() {
	if n != nil {
		n.x.DropAll()
	}
}

// DownHit returns the copy of vk the tier kept when tracking was lost (see
// Handlers.Keep), if the client's circuit is open and has not closed since
// then, and the copy is short of its expiry in Redis. Its reader died with
// the session, so its Owner is not asked: what covers the copy is the
// option's bargain, not tracking.
func (n *Tier[T]) DownHit(vk string) (v T, notFound, ok bool) {
	if n == nil || !n.x.Kept() || !n.b.Open() || n.b.Closings() != n.keptAt.Load() {
		return v, false, false
	}
	e, ok := n.store.GetIfPresent(vk)
	if !ok || Now() >= e.Down {
		return v, false, false
	}
	return e.V, e.NotFound, true
}

// Sum is the sum of an entry's bytes that the checks compare: 32 bits of
// maphash, so that it fits in a padding of Entry. Two different entries
// share one by a chance of 2⁻³², which makes a check miss an inconsistency
// (or find one that is not) once in four billion.
func (n *Tier[T]) Sum(b []byte) uint32 { return uint32(maphash.Bytes(n.seed, b)) }

// Peek returns the entry the tier holds for vk, live or not, counting no
// hit and keeping no tracking open.
func (n *Tier[T]) Peek(vk string) (Entry[T], bool) { return n.store.GetIfPresent(vk) }

// Holds reports whether the tier would serve now, to a Fetch, the entry of
// vk with sum and deadline until. It counts no hit and does not keep the
// tier's tracking open.
func (n *Tier[T]) Holds(vk string, sum uint32, until int64) bool {
	now := Now()
	if !n.x.Up() || !n.t.Heard(now) {
		return false
	}
	e, ok := n.store.GetIfPresent(vk)
	return ok && e.Sum == sum && e.Until == until && now < e.Until && e.Owner.Live(now)
}

// Len returns how many entries the tier holds once its store's pending
// work is done (for tests).
func (n *Tier[T]) Len() int {
	n.store.CleanUp()
	return n.store.EstimatedSize()
}

// Tracker and Index are the tier's parts, for the cache's reads and tests.
func (n *Tier[T]) Tracker() *Tracker { return n.t }
func (n *Tier[T]) Index() *Index     { return n.x }

// Sync returns once the tier has applied every invalidation Redis sent
// before the call, about a round trip later, or empties the tier (see
// Tracker.Sync).
func (n *Tier[T]) Sync(ctx context.Context) {
	if n != nil {
		n.t.Sync(ctx)
	}
}

// Stop ends the tier's tracking (see the cache's Close).
func (n *Tier[T]) Stop() {
	if n != nil {
		n.t.Stop()
	}
}

// Counts are the tier's invalidations, flushes and hits turned away for a
// late answer (see the cache's Stats).
func (n *Tier[T]) Counts() (invalidations, flushes, late uint64) {
	if n == nil {
		return 0, 0, 0
	}
	return n.x.Invalidations(), n.x.Flushes(), n.late.Load()
}
