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
//   - A hit is one GET and a decode. With WithStale, WithEarlyRefresh or
//     WithNearCache too: the value's expiry is stamped in its entry in the
//     server's clock (see below). Without them, a Cache whose first looks
//     mostly miss (a cold start, a flushed Redis) looks with the lock
//     script instead, which returns a value that is there as a GET would:
//     a hit is still one round trip, and a miss's compute starts after one
//     round trip instead of two.
//   - A call that starts after Set, Delete or Refresh of its key returned
//     in this process (or, with the near tier, after the write's
//     invalidation arrived) never returns the value that write replaced.
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
//   - Bytes that do not decode, or a key of another type (a list, a hash),
//     are a miss: recomputed and overwritten.
//   - Many keys missing at once: lock attempts take turns (half the client's
//     connection pool), so the store that wakes a key's waiters never queues
//     behind lock attempts for keys that missed later.
//
// # Many keys at once
//
// [Cache.FetchMany] is a batch Fetch with the same guarantee per key: the
// hits of all its keys are read in one round trip (one per node on a
// cluster, an MGET per hash slot), the missing keys take their compute locks
// with one script per slot, and compute is called once with exactly the
// keys this process won. Keys that another process, or a Fetch of this
// process, is computing are awaited as Fetch awaits them. Each value is
// stored under its own lock (fenced), and a key compute leaves out of its
// map does not exist.
//
// # Nobody waits after the first fill
//
// With [WithStale], a value stays in Redis past its TTL and is served at once
// while one process in the fleet refreshes it in the background; a failing
// refresh keeps the last good value served, and the backend is asked again at
// most once per [WithRefreshRetry] interval per key across the fleet. With
// [WithEarlyRefresh], a hot key is refreshed shortly before it expires
// (XFetch, with the refresh point drawn once per stored value), so callers
// never see it expire. Staleness is judged by Redis's clock: the script that
// stores a value stamps its expiry in the entry, in the server's time, and a
// hit reads it against an estimate of that time (a TIME round trip to each
// server about once a second while the Cache is read, bracketed by its
// send and reply, so no client clock is trusted). The estimate errs only
// early, by at most 22 ms, as long as the clocks involved drift apart by no
// more than 500 ppm (NTP's slew limit; chrony may slew faster while it
// corrects a large offset). A server clock stepped by hand, or a server
// that joins (a failover's new master, a Ring shard back up), is taken into
// account at the next sample, within about a second; a sample taken before
// this process slept or its clock was stepped is not used. While it is missing, older than 5 s or less
// certain than that (servers whose clocks disagree), for an entry without
// an expiry (written by a Cache without these options), and on a server
// whose keys do not expire with its clock (miniredis, whose TTLs move only
// by FastForward: checked once per Cache), a hit pipelines a PTTL with its
// GET instead, in the same round trip.
//
// [ErrNotFound] from compute is returned to every waiting process, and with
// [WithNegativeTTL] remembered as a tombstone. [Cache.Refresh] recomputes now
// under the same compute lock. [SetTTL] lets compute choose its result's TTL
// (from an upstream's Cache-Control, say) or not to store it.
//
// # Near cache
//
// With [WithNearCache], Fetch and FetchMany keep decoded values in process
// memory and answer hits without a round trip. Redis's server-assisted invalidation
// (CLIENT TRACKING in its default mode) removes a local copy when any
// client writes the key, or it expires or is evicted. Redis reports a write
// only to the processes whose tier read the key, so a write costs one
// message per process that holds it, however large the fleet (see
// bench/README.md, "Near tiers across a fleet"). Local copies are served
// only while tracking is up, never past the key's PTTL or its stale
// window; a server that cannot track turns the tier off (see
// [Stats].NearOff).
//
// Each Cache with [WithNearCache] holds, per Redis server (per master on a
// Cluster), one connection subscribed to the invalidations and one, the
// reader, on which it reads the values it keeps (tracked, reported to the
// subscriber); both are its own, made from the client's options, so the
// client's hooks do not see their commands. A read that finds the reader
// busy goes through the client and keeps nothing. They open at the first
// Fetch and close after a minute without one. A reader
// that fails takes its values out of the tier (Redis forgets what a closed
// connection read). When the subscriber drops (killed, network, failover), or
// goes a few seconds without answering a ping, the tier is emptied and
// bypassed until tracking is in place again. On a Cluster the masters are
// asked for every second, so a failover empties the tier and moves tracking
// to the new masters (a demoted master still reports the writes it
// replicates meanwhile). While they are up, the subscriber is pinged every
// 20 ms and the idle reader every 50 ms, and the tier (or the values the
// reader read) is bypassed, not emptied, whenever the latest answer is more
// than 100 ms old: invalidations that come late, over a slow network or
// from a stalled server, never let the tier hide a write that returned
// longer ago than that. Set and Delete of this Cache remove the local copy
// at once; other writers' invalidations arrived well under a millisecond
// after the write in the benchmarks, on loopback (see bench/README.md).
//
// The tier is off where Redis cannot track keys (a server older than 6.0,
// miniredis, a server that refuses CLIENT TRACKING), for a client it does
// not follow (a Ring, a failover client, a Cluster client that reads from
// replicas), and for an ACL user that may not run CLIENT TRACKING or
// subscribe to the channel "__redis__:invalidate" (grant it
// "+client|tracking +client|id &__redis__:invalidate"). Messages that other
// clients PUBLISH to that channel are ignored: only Redis's own
// invalidations count. The tier assumes that the Cache's keys stay in the
// client's database: Redis sends no invalidation for SWAPDB. Near hits are
// counted in [Stats].Hits and [Stats].NearHits, and reported as [EventHit]
// events with Near set.
//
// # Redis keys
//
// For key k and prefix p (see [WithPrefix]) a Cache uses the value "p{k}",
// the lock "p{k}:lock", recent compute errors "p{k}:err", the channel
// "p{k}:wake" and, after a failed background refresh, "p{k}:retry". A key
// containing a brace is replaced in the tag by a hash of it, so they always
// share a cluster slot. A tag t (see [Tag]) has a set "ptag:{t}" and an
// epoch "ptagv:{t}" (and, while an InvalidateTag of it works, sets aside
// "ptag:{t}:<token>" listed in "ptagx:{t}"). [Cache.Clear] removes the
// keys of these shapes, and no other.
//
// The compute lock is a plain string key with a token, not a lock.Mutex:
// the fetch script must take it in the same atomic step that finds the value
// missing, and a mutex's fencing counter would leave one more key per cached
// key behind.
//
// # Entry format
//
// A value is stored as a 3-byte header (magic "dp" and a format version) and
// the codec's bytes. Version 2 entries also record the compute's duration and
// the early-refresh point, or mark a not-found tombstone; a plain value is
// still written as version 1, which earlier releases read. Bytes of an unknown
// version read as a miss and are counted in [Stats].DecodeErrors.
//
// # Redis down
//
// By default a Redis error is returned, wrapped, and compute is not called:
// an outage of the cache does not become a stampede on the store behind it.
// [WithComputeWhenDown] chooses the other way. Once a server of the client
// is found down (see [ErrUnavailable]), calls on the same client fail at
// once with ErrUnavailable (a circuit breaker shared with the locks on that
// client) until the server answers again.
//
// # Failover
//
// Redis replicates asynchronously, and the compute lock is a key like the
// others. When the master of a key fails over while a process computes the
// key:
//
//   - If the lock had reached the promoted replica, the holder keeps it: its
//     renewals and its store reach the new master once its client knows the
//     new slot map (the breaker makes go-redis reload it), and its store
//     wakes the waiters; a waiter that missed the message reads again after
//     at most the holder's lease. No one computes again, unless the holder
//     could not renew for most of a lease (its compute's context is then
//     cancelled, and it starts over) or its store failed (its client's
//     circuit still open): then one process computes once more.
//   - If the lock was lost with the master, the next process that misses
//     takes it on the new master and computes once more. The holder's next
//     renewal is refused there, which cancels its compute's context; a
//     compute that returns a value anyway has its store refused, since the
//     lock no longer holds its token (a fenced store), so it never replaces
//     the newer value: its flight looks again and answers with that one.
//
// So a failover costs at most one more compute of a key being computed, and
// no store leaves a value in Redis older than one already served. What a
// failover can lose is a write that had not reached the replica: a value
// just stored is computed again, and one that replaced another (Set,
// Refresh, a refresh under [WithStale]) may give way to the older value
// again, until its next refresh.
//
// # Client options
//
// The library works with go-redis's defaults; these are the settings it
// recommends, and why:
//
//   - ContextTimeoutEnabled: true, so that a caller's deadline bounds its
//     round trips too, not only its waits (the first caller of a flight
//     reads Redis on its own context), and a compute that lost its lock is
//     not held in [Tag] past that. Deadlines then do what they say, and
//     a frozen server is found from callers' deadlines (see
//     [ErrUnavailable]).
//   - PoolSize: at least twice the number of goroutines that call the
//     cache at once (the default is 10 per CPU). Half of it is what lock
//     attempts may take when many keys miss at once (see the guarantees).
//   - ReadTimeout (5 s by default in go-redis v9.23): how long a call
//     waits for a reply when its context has no deadline, or when
//     ContextTimeoutEnabled is off. A call that times out makes the breaker
//     PING the server, which is found down if it does not answer within
//     half a second, or within ReadTimeout if that is shorter: lower it to
//     what a healthy Redis never takes.
//   - One client per process, made at startup, and the Caches and locks
//     made before its first command (the breaker then hooks every node of
//     a Cluster). Close the Caches (see [Cache.Close]), then the client, at
//     shutdown.
//   - For the near tier: a client of a single server or a Cluster client
//     that reads from masters (see [WithNearCache]); an ACL that allows
//     CLIENT TRACKING, CLIENT ID and the channel __redis__:invalidate.
//
// # Observing
//
// [WithObserver] receives every hit, miss, compute and wait as an [Event];
// [Cache.Stats] counts the same events. The module
// github.com/dogpile-go/dogpile/dogpileotel records them as OpenTelemetry
// metrics and spans. [WithLogger] logs the rare events: outages, takeovers,
// bytes that do not decode, a compute's panic with its stack.
package dogpile
