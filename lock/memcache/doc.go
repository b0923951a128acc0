// Package memcache is the lock package's [Mutex] on memcached, through
// github.com/bradfitz/gomemcache: for teams that run memcached and no Redis.
// The names and meanings are lock's (NewMutex, Lock, TryLock, Locked, the
// lease's Unlock, Extend, Done and Err, WithTTL, WithBackoff,
// WithWaitTimeout, WithAutoExtend, Do), and [ErrNotHeld], [ErrNotObtained]
// and [ErrLost] are lock's own values, so code moves between the stores by
// changing the constructor, and errors.Is checks work for both.
//
// Import it under another name next to gomemcache, whose package is also
// called memcache:
//
//	import mclock "github.com/dogpile-go/dogpile/lock/memcache"
//
// # How it works
//
// A lock is one key, "dogpile:mutex:" and the name, holding the owner's
// random token. Lock and TryLock store it with memcached's add, which
// stores only if the key is absent, atomically: at most one owner wins.
// Unlock and Extend read the key with gets and write it with cas
// (compare-and-swap), so they change it only if it still holds their
// token and nobody wrote it since; a release is a cas to an expiry in the
// past, since memcached's delete cannot check a token. A holder whose
// lease expired and passed to another owner gets [ErrNotHeld] and changes
// nothing.
//
// Names that are not valid memcached keys (more than 250 bytes with the
// prefix, or containing spaces or control characters) are replaced by
// their SHA-256, under "dogpile:mutex#": such a lock works the same, but
// its key no longer shows its name.
//
// # Limits
//
// Waiting polls. Memcached has no pub/sub, so a waiter retries with
// jittered exponential backoff ([WithBackoff], 2 ms to 500 ms by default)
// and learns of a release only at its next attempt: the lock passes to
// the next holder up to about the current backoff after it is released,
// and waiters are served in no particular order.
//
// Expiries are whole seconds. A TTL is at least 1 s ([WithTTL] panics
// below, [Lease.Extend] returns an error matching [ErrInvalid]), and memcached is told the TTL rounded up
// to whole seconds plus one: its clock ticks once a second, so an item of
// expiry n may expire as soon as n-1 seconds after it was stored. The
// holder trusts its lease for the TTL it asked for (less a small drift,
// on its own monotonic clock); a holder that dies frees the lock after
// the TTL plus up to two seconds.
//
// Memcached may evict a lock. It is a cache: under memory pressure it
// drops items before they expire, a lock key included, and then a second
// owner can take a lock that the first still believes it holds. Keep
// locks in a memcached pool of their own, sized well above its use, or
// started with -M (return errors instead of evicting). A restart of
// memcached loses every lock the same way.
//
// There is no fencing. Lock's fencing numbers come from a counter that
// must never go back; memcached's incr counters can be evicted or lost in
// a restart like any item and then start again from zero, so numbers
// drawn from them could repeat, and a fence that may repeat protects
// nothing. A holder paused past its lease (GC, a stopped VM) can therefore
// overlap with the next one; where that matters, use the lock package on
// Redis.
//
// # Deadlines
//
// gomemcache takes no context: each round trip is bounded by the client's
// Timeout (500 ms by default), not by ctx. Calls check ctx before each
// round trip and a waiting Lock returns as soon as ctx ends, so a call
// returns by ctx's deadline plus at most one round trip's timeout. Unlock
// releases even with a done ctx, bounded by the same timeout. If the
// reply to an acquiring add is lost, the lock is taken back at once, best
// effort; if memcached cannot be reached even for that, the key expires
// after its TTL, as for a holder that crashed.
package memcache
