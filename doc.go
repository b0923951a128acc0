// Package dogpile is a typed read-through cache on Redis that keeps a missing
// or expired key from stampeding the backing store: concurrent misses for a
// key, in one process or across every process sharing the Redis server or
// cluster, call compute once, and everyone else waits for the stored value.
//
//	users := dogpile.New[User](rdb)
//	u, err := users.Fetch(ctx, "user:42", time.Minute, func(ctx context.Context) (User, error) {
//		return db.LoadUser(ctx, 42) // called once in the fleet per expiry
//	})
//
// # Guarantees
//
//   - One compute per expiry, fleet-wide: of all processes that miss a key,
//     exactly one computes; the others wait for its value (see [Cache.Fetch]).
//   - Read your writes: a call that starts after [Cache.Set], [Cache.Delete]
//     or [Cache.Refresh] of its key returned in this process (or, with the
//     near tier, after the write's invalidation arrived) never returns the
//     value that write replaced.
//   - Fenced stores: a process that lost its compute lock (to Set, Delete, a
//     takeover or a failover) never overwrites a newer value, and its own
//     callers get the newer value too.
//   - Waiters are woken by a push from Redis the moment the value is stored,
//     and each wait is bounded by the holder's lease ([WithLease]): a lost
//     message or a process that died mid-compute costs at most one lease.
//   - A failed compute stores nothing and releases the lock at once: callers
//     in this process get its error, waiters elsewhere [ErrComputeFailed].
//   - Bytes that do not decode, or a key of another type, are a miss:
//     recomputed and overwritten.
//   - [Cache.FetchMany] gives each key the guarantees of Fetch, calling compute
//     once with exactly the keys this process won.
//   - With [WithStale], a value past its TTL is served at once while one
//     process in the fleet refreshes it in the background; a failing refresh
//     keeps it served, asking the backend at most once per [WithRefreshRetry].
//   - With [WithEarlyRefresh], a hot key is refreshed by one process shortly
//     before it expires, so its callers never see it expire.
//   - With [WithNearCache], a value kept in process memory never hides a
//     write that returned more than 100 ms ago, nor outlives its TTL in Redis.
//   - A failover of a key's master costs at most one more compute of a key
//     being computed, and no store leaves a value older than one already served.
//
// # Near cache
//
// The near tier turns itself off (logged, [Stats].NearOff) where Redis cannot
// track keys: a server older than 6.0, miniredis, a Ring, a failover client, a
// Cluster client that reads from replicas, or an ACL user refused CLIENT
// TRACKING, CLIENT ID or the channel "__redis__:invalidate".
//
// # Errors
//
// Match errors with errors.Is: [ErrNotFound] (compute found nothing; cached as a
// tombstone with [WithNegativeTTL]), [ErrComputeFailed], [ErrUnavailable] (Redis
// found down: calls fail at once, and compute is not called unless
// [WithComputeWhenDown]), [ErrInvalid], [ErrMiss] (from [Cache.Get]) and
// [ErrClosed]. Other Redis errors are returned wrapped. [WithObserver],
// [Cache.Stats] and [WithLogger] report what a Cache does.
//
// How it works: docs/design.md in the repository, with the Redis keys, the
// entry format, failover and the client options it recommends.
package dogpile
