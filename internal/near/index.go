// Package near keeps a cache's near tier (the decoded values a process
// holds in front of Redis) coherent with Redis across a fleet: the Index
// decides which values read from Redis may enter the tier and removes
// those that Redis reports written, and the Tracker holds the connections
// that read the values and receive those reports (CLIENT TRACKING). A
// Tier puts them together with the typed store of decoded values.
package near

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// stripes is how many generation counters an Index keeps: an invalidation
// of a key bumps the one its value key hashes to.
const stripes = 256

// Handlers are what an Index does to the cache it serves. Each is called
// with the Index's lock held, so they must not call the Index.
type Handlers struct {
	Remove func(vk string) // drops a key from the store
	Purge  func()          // empties the store
	// Forget forgets the cache's flights of vk, or of every key with "":
	// after an invalidation arrives, no Fetch of the process returns the
	// value it replaced, from the tier or from a read of Redis in flight.
	Forget func(vk string)
	// Notify, if set, reports an invalidation from Redis of vk (or, with
	// "", of every key), after the lock is released: it calls the
	// observer.
	Notify func(vk string)
	// Keep, if set, makes a loss of tracking's connection leave the store
	// as it is (see Index.Kept), and is called when it does: the cache
	// may serve those copies while Redis is unreachable (dogpile's
	// WithStaleIfDown), never as fresh. They are emptied when tracking
	// comes back, and a copy is removed when a read of its key from Redis
	// completes meanwhile.
	Keep func()
}

// An Index is the coherence state of a near tier. Reads of the store take
// no lock; inserts, invalidations and flushes are ordered by mu, so that a
// read that started before an invalidation (or a flush) cannot store the
// value it read after that invalidation removed the key: the insert sees
// that the key's generation (or the epoch) moved since its ticket.
type Index struct {
	h     Handlers
	mu    sync.Mutex
	epoch atomic.Uint64 // odd while tracking is up; bumped at every change
	kept  atomic.Bool   // the store holds copies kept when tracking was lost
	gens  [stripes]atomic.Uint64
	seed  maphash.Seed

	invalidations, flushes atomic.Uint64
}

// NewIndex returns the Index of a tier changed through h, with tracking
// not yet up.
func NewIndex(h Handlers) *Index {
	return &Index{h: h, seed: maphash.MakeSeed()}
}

// A Ticket is taken before a read from Redis; the value read may enter
// the tier only if nothing invalidated its key since.
type Ticket struct {
	epoch, gen uint64
	At         int64 // Now() when the read started
}

// base is the origin of Now: a monotonic clock in nanoseconds.
var base = time.Now()

// Now is the tier's clock, in nanoseconds.
func Now() int64 { return int64(time.Since(base)) }

func (x *Index) stripe(vk string) *atomic.Uint64 {
	return &x.gens[maphash.String(x.seed, vk)%stripes]
}

// Up reports whether tracking is in place, so local values may be served.
func (x *Index) Up() bool { return x.epoch.Load()%2 == 1 }

// Ticket is taken before a read of vk from Redis.
func (x *Index) Ticket(vk string) Ticket {
	return Ticket{epoch: x.epoch.Load(), gen: x.stripe(vk).Load(), At: Now()}
}

// Admit runs put if tk is still good: tracking was up when it was taken and
// has not dropped since, and no invalidation of vk's stripe came meanwhile.
// Otherwise, or with no put (a value that may not enter), it removes vk:
// the caller is about to return the value it read, and an older copy of vk
// left in the store (its stripe was bumped by another key's invalidation)
// would make that caller's next Fetch go back in time.
func (x *Index) Admit(vk string, tk Ticket, put func()) {
	if tk.epoch%2 == 0 && x.epoch.Load() == tk.epoch && !x.kept.Load() {
		return // still down: the store is empty
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case !x.good(vk, tk):
		// Also a kept copy (tracking down): the caller returns what it
		// read, and the copy, older, must not be served after it.
		x.h.Remove(vk) // the stripe moved since tk: older reads fail too
	case put != nil:
		put()
	default:
		// The stripe moves: a read of vk in flight, which may be older
		// than the one the caller is about to return, may not enter.
		x.drop(vk)
	}
}

// Good reports whether nothing invalidated vk (or its stripe) since tk was
// taken, tracking up all along.
func (x *Index) Good(vk string, tk Ticket) bool { return x.good(vk, tk) }

func (x *Index) good(vk string, tk Ticket) bool {
	return tk.epoch%2 == 1 && x.epoch.Load() == tk.epoch && x.stripe(vk).Load() == tk.gen
}

// invalidate removes the keys from the tier (Redis wrote them).
func (x *Index) invalidate(keys []string) {
	x.mu.Lock()
	n := 0
	for _, k := range keys {
		if !isValueKey(k) {
			continue // a lock, an error list, a retry mark: not in the tier
		}
		x.drop(k)
		x.h.Forget(k)
		x.invalidations.Add(1) // counted once applied: Stats may be used to wait for it
		keys[n] = k
		n++
	}
	x.mu.Unlock()
	if x.h.Notify != nil {
		for _, k := range keys[:n] {
			x.h.Notify(k)
		}
	}
}

// Drop removes vk after this process wrote it (Set, Delete, Refresh),
// before Redis's invalidation arrives: this process reads its own writes.
func (x *Index) Drop(vk string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.drop(vk)
}

// DropAll empties the tier, tracking staying up, after this process
// removed every value (Clear): tickets taken before fail, and every flight
// is forgotten.
func (x *Index) DropAll() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.epoch.Add(2) // parity is whether tracking is up: unchanged
	x.kept.Store(false)
	x.h.Purge()
	x.h.Forget("")
}

// drop removes vk and fails the tickets of reads of it in flight. x.mu is
// held.
func (x *Index) drop(vk string) {
	x.stripe(vk).Add(1)
	x.h.Remove(vk)
}

// setUp records that tracking is in place (up) or lost; either way every
// flight is forgotten and, unless kept, the store is emptied: what they
// held could not be verified across the change. lost says that tracking's
// connection failed (rather than the tracker stopping): with Handlers.Keep
// the store is then kept (see Kept); coming up always empties it.
func (x *Index) setUp(up, lost bool) {
	x.mu.Lock()
	if x.Up() == up {
		x.mu.Unlock()
		return
	}
	x.epoch.Add(1)
	if !up && lost && x.h.Keep != nil {
		x.h.Keep() // first: a caller that sees kept sees what Keep recorded
		x.kept.Store(true)
	} else {
		x.kept.Store(false)
		x.h.Purge()
	}
	x.h.Forget("")
	x.mu.Unlock()
	if !up {
		x.flushes.Add(1)
		if x.h.Notify != nil {
			x.h.Notify("")
		}
	}
}

// Kept reports whether the store holds copies that tracking no longer
// covers, kept when it was lost (see Handlers.Keep): they may be served
// only while Redis cannot be reached.
func (x *Index) Kept() bool { return x.kept.Load() }

// Invalidations counts the keys Redis reported written, expired or
// evicted; Flushes, the times the tier was emptied because tracking was
// lost (a FLUSHALL ends tracking's connection too).
func (x *Index) Invalidations() uint64 { return x.invalidations.Load() }
func (x *Index) Flushes() uint64       { return x.flushes.Load() }

// isValueKey tells a value key (see redisutil.Key: it ends with its hash
// tag, hashed or not) from the other keys of a cache key, which add a
// suffix.
func isValueKey(k string) bool {
	return len(k) > 0 && (k[len(k)-1] == '}' || k[len(k)-1] == '#')
}
