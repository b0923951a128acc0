package dogpile

import (
	"context"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/breaker"
	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/flight"
	"github.com/dogpile-go/dogpile/internal/near"
)

// WithNearCache keeps up to maxEntries decoded values in process memory, so
// that Fetch and FetchMany answer a key read moments ago without a round
// trip (Get always reads Redis). A write of the key by any client removes
// the copy (Redis's CLIENT TRACKING): once its invalidation arrived, no call
// here returns the replaced value, and a write that returned more than 100
// ms ago never is, however late it comes. No copy outlives the key's TTL or
// its stale or early-refresh point. Where keys cannot be tracked the tier
// turns itself off, logged and in [Stats].NearOff. Near hits share one
// value: treat it as read-only. It panics if maxEntries is not positive.
func WithNearCache(maxEntries int) Option {
	if maxEntries <= 0 {
		panic(fmt.Sprintf("dogpile: near cache size %d is not positive (a programmer error)", maxEntries))
	}
	return optionFunc(func(o *options) { o.nearEntries = maxEntries })
}

// withNear sets the near tier's timings and connections (see near.Config:
// the zero Config is internal/near's defaults). It is for tests, which
// shorten them; it has no effect without WithNearCache.
func withNear(cfg near.Config) Option {
	return optionFunc(func(o *options) { o.near = cfg })
}

// A nearEntry is one decoded value in the near tier. Every near hit copies
// one: sum sits in notFound's padding, so that the checks of sampled hits
// make it no larger, on or off.
type nearEntry[T any] struct {
	v        T
	notFound bool   // a not-found tombstone (see WithNegativeTTL)
	sum      uint32 // with checks of sampled hits, the sum of its bytes (see nearTier.sum); else 0
	until    int64  // served while near.Now() < until
	down     int64  // its expiry in Redis: kept and served until then while Redis is down (see WithStaleIfDown)
	owner    *near.Owner
}

// nearTier is a Cache's near tier: the bounded store of decoded values,
// keyed by value key, its coherence index and its tracker (internal/near),
// and what of the Cache it reads. A nil *nearTier is a Cache without one:
// every method is then a no-op (or says "not held"), so callers need no
// check of their own.
type nearTier[T any] struct {
	store *otter.Cache[string, nearEntry[T]]
	x     *near.Index
	t     *near.Tracker
	// b is the client's breaker; keptAt, its Closings when tracking was
	// lost and the store kept (see WithStaleIfDown).
	b      *breaker.Breaker
	keptAt atomic.Uint64

	// seed keys the sums of entries, kept when hits are checked
	// (WithConsistencySampling, WithSourceCheck; see sum).
	seed maphash.Seed

	opts    *options
	stats   *counters
	flights *flight.Group[outcome]
	decode  func(b []byte) (T, entry.Meta, error)
	emit    func(ctx context.Context, e Event) context.Context
}

// newNear builds the near tier of a Cache on client with opts, whose
// flights it forgets on invalidations and whose counters it keeps.
func newNear[T any](client redis.UniversalClient, b *breaker.Breaker, opts *options, flights *flight.Group[outcome], stats *counters,
	decode func([]byte) (T, entry.Meta, error), emit func(context.Context, Event) context.Context) *nearTier[T] {
	store := otter.Must(&otter.Options[string, nearEntry[T]]{
		MaximumSize: opts.nearEntries,
		// Maintenance runs on the goroutine that writes: no goroutine of the
		// store's own outlives the Cache, and the bound holds after each write.
		Executor: func(fn func()) { fn() },
	})
	n := &nearTier[T]{store: store, b: b, opts: opts, stats: stats, flights: flights, decode: decode, emit: emit, seed: maphash.MakeSeed()}
	h := near.Handlers{
		Remove: func(vk string) { store.Invalidate(vk) },
		Purge:  store.InvalidateAll,
		Forget: func(vk string) {
			if vk == "" {
				flights.ForgetAll()
			} else {
				flights.Forget(vk)
			}
		},
	}
	if opts.staleIfDown && opts.stale > 0 {
		h.Keep = func() { n.keptAt.Store(b.Closings()) }
	}
	if opts.observer != nil {
		h.Notify = func(vk string) {
			emit(context.Background(), Event{Kind: EventInvalidate, Key: n.key(vk)})
		}
	}
	n.x = near.NewIndex(h)
	n.t = near.NewTracker(client, n.x, n.off, opts.near)
	return n
}

// key is the key whose value key is vk, or vk itself for a key stored
// under a hash of its name (see redisutil.Tag): "" stays "".
func (n *nearTier[T]) key(vk string) string {
	rest, ok := strings.CutPrefix(vk, n.opts.prefix)
	if name, plain := strings.CutSuffix(rest, "}"); ok && plain && strings.HasPrefix(name, "{") {
		return name[1:]
	}
	return vk
}

// hit returns the near tier's value for vk, and whether it is a not-found
// tombstone, if the tier holds a live one and tracking is up (see
// core.nearHit, which answers Fetch with it).
func (n *nearTier[T]) hit(vk string) (v T, notFound, ok bool) {
	if n == nil {
		return v, false, false
	}
	now := near.Now()
	n.t.Use(now)
	if !n.x.Up() {
		return v, false, false
	}
	if !n.t.Heard(now) {
		n.stats.nearLate.Add(1) // a slow network or a stalled server: Redis answers
		return v, false, false
	}
	e, ok := n.store.GetIfPresent(vk)
	if !ok || now >= e.until {
		return v, false, false
	}
	if !e.owner.Live(now) {
		n.stats.nearLate.Add(1) // its reader failed, or answers late
		return v, false, false
	}
	return e.v, e.notFound, true
}

// heard reports whether a Fetch may join a flight of its process (see
// group.join): unless the near tier's tracking is in place and has not
// proven itself within MaxLag. Without tracking in place (no tier, or off,
// or Redis down) nothing of other processes' writes is heard anyway, as in
// a Cache without a tier: flights are shared as they are there (a compute
// WithComputeWhenDown runs once, not once per caller).
func (n *nearTier[T]) heard() bool {
	return n == nil || !n.x.Up() || n.t.Heard(near.Now())
}

// unheard makes cl, whose read of Redis is not tracked, a flight no later
// caller joins (see group.join), while tracking is in place: otherwise
// none is heard (see heard), and the flights of that time are forgotten
// when it comes back (see near.Index.setUp).
func (n *nearTier[T]) unheard(id flightID, cl *call) {
	if n != nil && n.x.Up() {
		n.flights.Unheard(id, cl)
	}
}

// ticket is taken before Fetch reads vk from Redis.
func (n *nearTier[T]) ticket(vk string) near.Ticket {
	if n == nil {
		return near.Ticket{}
	}
	return n.x.Ticket(vk)
}

// put stores a value read from Redis with its PTTL in the near tier, for
// as long as Redis serves it fresh: up to its expiry, less the stale
// window and the early-refresh gap, past which Fetch must see Redis. A
// value that may not enter (read on no tracked connection, o nil; without
// a TTL; already past that point) removes an older copy, as a refused one
// does (see near.Index.Admit).
func (n *nearTier[T]) put(vk string, tk near.Ticket, o *near.Owner, b []byte, m entry.Meta, pttl time.Duration) {
	if n != nil {
		n.x.Admit(vk, tk, n.admit(vk, o, tk, b, m, pttl))
	}
}

// admit returns the put of a value read from Redis into the tier, or nil
// if it may not enter (see put).
func (n *nearTier[T]) admit(vk string, o *near.Owner, tk near.Ticket, b []byte, m entry.Meta, pttl time.Duration) func() {
	if o == nil || pttl <= 0 { // a key without a TTL is no dogpile value
		return nil
	}
	life := pttl - n.opts.stale
	if n.opts.beta > 0 && !m.NotFound {
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
	e := nearEntry[T]{v: v, notFound: m.NotFound, until: tk.At + int64(life), down: tk.At + int64(pttl), owner: o}
	if n.opts.nearCheck > 0 || n.opts.sourceCheck > 0 {
		e.sum = n.sum(b)
	}
	return func() { n.store.Set(vk, e) }
}

// forget removes vk after this process wrote it (Set, Delete), before
// Redis's invalidation arrives: this process reads its own writes.
func (n *nearTier[T]) forget(vk string) {
	if n != nil {
		n.x.Drop(vk)
	}
}

// forgetAll empties the tier after this process cleared the Cache.
func (n *nearTier[T]) forgetAll() {
	if n != nil {
		n.x.DropAll()
	}
}

// sync returns once the near tier has applied every invalidation Redis
// sent before the call, about a round trip later, or empties the tier (see
// near.Tracker.Sync).
func (n *nearTier[T]) sync(ctx context.Context) {
	if n != nil {
		n.t.Sync(ctx)
	}
}

// stop ends the tier's tracking (see Close).
func (n *nearTier[T]) stop() {
	if n != nil {
		n.t.Stop()
	}
}

// counts are the tier's invalidations and flushes (see Stats).
func (n *nearTier[T]) counts() (invalidations, flushes uint64) {
	if n == nil {
		return 0, 0
	}
	return n.x.Invalidations(), n.x.Flushes()
}

// off records that the near tier cannot work here, and says so once.
func (n *nearTier[T]) off(reason string) {
	if n.stats.nearOff.Swap(true) {
		return
	}
	if l := n.opts.logger; l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, "dogpile: near cache off; every Fetch reads redis",
			slog.String("prefix", n.opts.prefix), slog.String("reason", reason))
	}
}

// downHit returns the copy of vk the tier kept when tracking was lost (see
// near.Handlers.Keep), if the client's circuit is open and has not closed
// since then, and the copy is short of its expiry in Redis. Its reader
// died with the session, so its Owner is not asked: what covers the copy
// is the option's bargain, not tracking.
func (n *nearTier[T]) downHit(vk string) (v T, notFound, ok bool) {
	if n == nil || !n.x.Kept() || !n.b.Open() || n.b.Closings() != n.keptAt.Load() {
		return v, false, false
	}
	e, ok := n.store.GetIfPresent(vk)
	if !ok || near.Now() >= e.down {
		return v, false, false
	}
	return e.v, e.notFound, true
}
