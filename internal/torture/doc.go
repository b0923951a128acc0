// Package torture checks dogpile's guarantees under random, combined
// faults: several worker processes (the test binary re-executed through
// redistest's child harness), each running goroutines of random cache
// calls and lock sections on a small key space, while a nemesis stops,
// kills, flushes and fails over the Redis under them and stops the
// workers themselves. Every call is recorded in a ledger with wall-clock
// times; a checker then judges the whole history against the rules below.
// Its test is the driver: TestTorture runs a server and a cluster with
// replicas, in parallel, for 15 s each (4 s with -short), on a seed it
// prints; -torture.seed replays that seed's schedule (the plan, each
// goroutine's choices, the nemesis's), -torture.duration runs longer.
//
// # Checker and runner
//
// The package itself is only the checker (like porcupine, it has no
// harness): it draws a run's [Plan] from its seed, writes and reads the
// workers' ledgers ([Ledger], [ReadLedgers]), and judges a [History]
// ([Check]) into a [Verdict] whose violations [Excerpt] prints. It
// imports neither dogpile nor lock. The runner, which drives their public
// API, is the package's test code: the run and the nemesis in the test
// process (runner_test.go, runner_nemesis_test.go,
// runner_nemesis_cluster_test.go), the workers in child processes, the
// test binary re-executed (runner_worker_test.go,
// runner_cachework_test.go, runner_lockwork_test.go).
//
// # Workload
//
// Each process opens three Caches (a prefix each), whose TTL, WithStale,
// WithEarlyRefresh and WithNegativeTTL the seed draws, and for a Cache
// WithStale its WithSoftTimeout and WithStaleIfDown, as it draws which
// processes give a Cache WithNearCache; on a single server some processes
// reach Redis through a redistest.Proxy. Cache goroutines call Fetch,
// FetchMany, Refresh, Set, SetTagged, Delete, Expire, InvalidateTag and
// Get on five keys, half of them with ttl 0 (WithDefaultTTL); computes
// ask Previous, and Tag their values with their keys' tags (even and
// odd keys; a FetchMany's values get the tags of all its keys). A value is a
// version with its key and writer: compute functions and Sets draw
// versions from a counter on an oracle server that no fault touches, so
// versions are unique and ordered by when they were drawn. Computes take
// up to 30 ms, and now and then fail or find nothing. Lock goroutines hold
// a Mutex (plain or WithFair), a MultiMutex of two of the same names, a
// Semaphore of 3 permits (taking 1 or 2) or an RWMutex (read or write),
// for up to 30 ms, or past the TTL with WithAutoExtend, and leave their
// section early when the lease's Done closes.
//
// # Ledger
//
// Each worker appends to a file of its own one JSON line per phase of an
// op (begun; for a lock, acquired and exited; ended), each with one
// write(2), so that what was written survives the process. The parent adds the faults, each with the
// time it began and the time it was healed. All processes read one
// machine's wall clock; comparisons between two processes' times allow
// Slack.
//
// # Nemeses
//
// A round starts one fault, or two or three of distinct categories at
// once, holds them, heals them in reverse and waits a random calm:
// server faults (SIGSTOP and SIGCONT of a server or cluster node; SIGKILL
// and restart of the server, empty; on the cluster, a master killed until
// its replica is promoted, then back as a replica, or a graceful CLUSTER
// FAILOVER), connection faults (FLUSHALL, SCRIPT FLUSH, CLIENT KILL TYPE
// normal or pubsub, which includes the near tier's tracking connections;
// replies dropped by the proxy, or held back by it from a few ms to past
// a lease) and process faults (a worker stopped past
// every lease it holds, or killed and replaced by a new process with the
// same configuration). A pause of a cluster node is kept short of the
// node timeout; a failover the cluster starts all the same is followed
// and recorded as a split brain: the old master, back, takes writes as a
// master until it learns that it was replaced.
//
// # Rules
//
// Each rule quotes the promise it checks, and says what excuses an
// exception; a rule that finds one reports the ops involved.
//
//   - phantom: every version a read returns was drawn for that key, by a
//     compute or a Set that began before the read returned. (Stored bytes
//     are a value of the Cache's key: README, "Fenced stores".)
//   - read-after-write: once a Set, Delete or Refresh of a key returned,
//     a read of the key that starts later does not return a value written
//     before the write began (for a Refresh, before its value was drawn):
//     in the writing process at once; in another at its next read of
//     Redis, which a Fetch may share with a flight of its process (a
//     Fetch's or a FetchMany's) begun before the write returned; with a
//     near tier, after NearBound plus
//     the time the server or the reader was stopped (each run reports the
//     longest lag it saw within the bound). Excused: a failover
//     that may have promoted a replica without the write; a read during a
//     graceful failover (the old master answers reads until it learns it
//     was replaced, and go-redis may take its slot map from it); in another
//     process, a Fetch answered with a copy kept WithStaleIfDown (see
//     stale-if-down). (README, "Read your writes in the writing process",
//     "The near tier"; Cache.Set and Cache.Refresh; WithStaleIfDown.)
//   - monotonic: a caller (goroutine) that saw a value shown to have been
//     in Redis (by a Set, a Get, or a read in another process than the one
//     that computed it) never later reads a value written before that one
//     was drawn, within the bounds and excuses of read-after-write.
//     ("Other processes see the write at their next read of Redis".)
//   - invalidate: once an InvalidateTag returned, no read that starts
//     later returns a value tagged with one of its tags before it began
//     (a compute's Tag returned, or a SetTagged returned), even if stored
//     after it: in the invalidating process at once, in another within the
//     bounds of read-after-write; on a Cluster, where such a value is stored
//     and removed again, from NearBound after its compute's call returned.
//     Caches WithStale serve invalidated values stale and are not judged.
//     Excused: a killed master; on a Cluster, any loss of data. (README,
//     "Tags"; Cache.InvalidateTag.)
//   - refresh: a Refresh that returns a value returns one not yet written
//     when it began: its own compute's, or that of the compute it waited
//     for, or a Set's meanwhile, or that of a Refresh of its process it
//     joined. (Cache.Refresh: "computes the value of key
//     now ... if another process is computing key at that moment, Refresh
//     waits for its result".)
//   - compute-overlap: two computes of one key never run at once, in one
//     process or two. Excused: the first lost its compute lock to a Set or
//     Delete of the key, to an InvalidateTag of a tag whose set held the
//     key, to a server stopped, restarted, flushed or failed over, or to a
//     stop of its process. A compute's lock counts from the
//     start of the call whose compute it is. (README, "One compute per
//     expiry in the fleet".)
//   - compute-fresh: no compute of a key, but a Refresh's, takes the
//     compute lock while the key holds a value or tombstone stored less
//     than its TTL ago (two thirds of it with WithEarlyRefresh; less 22 ms
//     with WithStale or WithEarlyRefresh, whose hits judge a value's age by
//     an estimate of the server's clock that errs early by up to that): stored by
//     a Set that returned, or by a compute whose value (seen in Redis) its
//     call returned with no Set, Delete, InvalidateTag or fault that could
//     have refused the store. Not a violation: a Delete, a compute that
//     found nothing (it drops the value, or stores a tombstone), an
//     InvalidateTag of a tag whose set held the key (it voids the key's
//     value, whatever that value's own tags). Excused: a restart, FLUSHALL
//     or a killed master. (README,
//     "One compute per expiry"; WithEarlyRefresh: "at most 1.5 computes per
//     TTL period".)
//   - exclusion: conflicting holders of one name (any two of a mutex name,
//     plain, fair or in a MultiMutex; a writer and anyone of an RWMutex) are
//     never inside their sections at once; a section ends when its hold is
//     over or its lease's Done closes. Excused: the earlier holder's process
//     was stopped, or ran late (a starved CPU, see KStall) all the time the
//     two overlapped, or the server lost its data. (README, "On one Redis server
//     that keeps its data, a lock has at most one live lease"; "Lease.Done
//     closes before the key can expire in Redis"; lock doc, MultiMutex and
//     WithFair.)
//   - semaphore: the permits held at once never exceed the semaphore's
//     size, but for holders excused as above. (Semaphore: "at most permits
//     permits are held at a time".)
//   - fence: no two leases of one name share a fencing number, and a lease
//     asked for after another was granted has a larger one, across
//     restarts, FLUSHALL and killed masters. Excused: a split brain, where
//     two masters draw from copies of one counter at once (the lock doc's
//     condition that a failover take a second from the old master's last
//     number to the new one's first does not hold). (README, "fencing
//     numbers strictly increase per name"; lock doc, "Lost leases and
//     fencing".)
//   - leak: a worker that closed its Caches and its client has no
//     goroutine left over. (Cache.Close: "no goroutine of the Cache
//     outlives Close"; lock: "A lock needs no Close".)
//   - previous: the value Previous hands a compute was drawn for that key
//     of that Cache before the compute began. (Previous: "the value it
//     replaces".)
//   - expiry: no read that starts later than a value's TTL, plus its stale
//     window, after it was shown in Redis returns it, from Redis or a near
//     tier or a kept copy; a caller that joined a flight held open
//     WithSoftTimeout, up to that timeout later; excused: a caller that
//     may have joined a flight of its process begun in time. (Fetch's ttl; WithStale;
//     WithStaleIfDown: "up to the value's stale point".)
//   - stale-if-down: a Fetch answers with a copy the near tier kept only in
//     a Cache WithStaleIfDown, and only within DownBound of a fault that
//     may have made Redis unreachable (a server stopped, killed or failed
//     over, replies lost or late, the process stopped). (WithStaleIfDown:
//     "never served while Redis answers".)
//
// Each run logs its figures: the ops by kind (and how many failed), the
// faults by kind, and per rule how much it judged and how many exceptions
// a fault, a stopped process or a shared flight excused.
//
// Violations that are instances of known defects (found by this checker,
// reported in issue 24, not fixed yet; see Known) are logged, the first
// of each with its excerpt, and fail the test only with -torture.strict. A failure prints the seed
// and an excerpt of the history around each violation: the faults in
// effect, the ops that break the rule, and the other ops on the same keys
// or names at the time. -torture.keep saves the history, and
// TestCheckSaved with -torture.history checks a saved one again.
package torture
