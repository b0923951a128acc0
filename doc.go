// Package dogpile is a typed read-through cache on Redis that keeps a missing
// or expired key from stampeding the backing store. Concurrent misses for a
// key share one compute, within a process (one flight per key) and across
// every process that shares the Redis server or cluster (a compute lock with
// a short, renewed lease). Everyone else waits, is woken by Redis the moment
// the value is stored, and reads it.
//
//	users := dogpile.New[User](rdb)
//	u, err := users.Fetch(ctx, "user:42", time.Minute, func(ctx context.Context) (User, error) {
//		return db.LoadUser(ctx, 42) // called once in the fleet per expiry
//	})
//
// # Guarantees
//
//   - A hit is one round trip (a GET) and a decode.
//   - On a miss exactly one process computes: the one whose lock script finds
//     neither the value nor another holder. It stores the value, releases the
//     lock and publishes a wake-up in one script that first checks it still
//     holds the lock (a fenced write), so a holder that lost its lock never
//     overwrites a newer value.
//   - Waiting processes are woken by pub/sub (sharded pub/sub on a cluster),
//     all keys of a client sharing one subscription connection, and each wait
//     is bounded by the holder's remaining lease, so a lost message costs at
//     most one lease. The wake-up carries a stored value of up to 64 KiB,
//     which waiters decode without reading it again.
//   - The lease (see [WithLease]) is renewed while compute runs. A process
//     that dies mid-compute is taken over within one lease.
//   - A failed compute stores nothing, releases the lock at once and tells the
//     waiting processes, which return [ErrComputeFailed].
//   - Bytes that do not decode are a miss: recomputed and overwritten.
//
// # Redis keys
//
// For key k and prefix p (see [WithPrefix]) a Cache uses the value "p{k}",
// the lock "p{k}:lock", recent compute errors "p{k}:err" and the channel
// "p{k}:wake". A key containing a brace is replaced in the tag by a hash of
// it, so the four always share a cluster slot.
//
// # Redis down
//
// By default a Redis error is returned, wrapped, and compute is not called:
// an outage of the cache does not become a stampede on the store behind it.
// [WithComputeWhenDown] chooses the other way.
package dogpile
