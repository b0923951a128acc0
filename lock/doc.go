// Package lock provides locks that many processes share through Redis:
//
//   - [Mutex]: one holder at a time; [WithFair] serves waiters in order.
//   - [Semaphore]: at most N permits held, weighted, first come first served.
//   - [RWMutex]: many readers or one writer; waiting writers go first.
//   - [MultiMutex]: several mutexes locked together, all or nothing.
//   - [Redlock]: a mutex on a majority of independent Redis servers.
//
// All of them grant the same [Lease], with the same TTL, watchdog,
// lost-lease signal and release semantics; all but Redlock give it a
// fencing number.
//
// # Leases
//
// Acquiring a lock returns a [Lease]: one owner's hold, identified in Redis
// by a random token. Only the lease can extend or release what it holds;
// releasing a lock that expired or passed to another owner returns
// [ErrNotHeld] and changes nothing. So does releasing a lease that has
// reported itself lost, but for deleting its token wherever Redis still
// holds it. Every lease has a TTL, so a process that
// dies while holding a lock frees it after at most one TTL. With
// [WithAutoExtend] a watchdog extends the lease while it is held.
//
// # Lost leases and fencing
//
// A lease can be lost: it expires while its holder is slow, or Redis refuses
// an extension. [Lease.Done] closes when that happens, measured on the
// holder's monotonic clock so that it fires before the key can expire in
// Redis. A process can still be paused (GC, a stopped VM) past that moment
// and wake up believing it holds the lock. Against that, each lease carries
// a fencing number ([Lease.Fence]) that strictly increases per lock name:
// pass it to the storage you protect and have it reject numbers lower than
// the highest it has seen.
//
// A lease is timed from when its request was sent. A grant whose reply
// comes after the lease's safe deadline (a network slower than the TTL) is
// not handed out: the lock is taken again, or the wait goes on. A waiting
// call granted too late tries again at once, with the same token, to
// renew what it was granted; one whose context ends first, or whose next
// attempt fails, undoes it (with Redis unreachable, it expires within the
// TTL). A reply that slow usually meets the client's read timeout first:
// the call then fails with that error, and its request is undone. A
// Redlock counts a server that slow as failed, and waits for no server
// once a majority has answered.
//
// A Redlock's requests to the servers that have not answered once a
// majority decided go on in the background, each bounded by its timeout;
// a release gives them 5 ms more, so that normally the lock is gone
// everywhere when Unlock returns. A grant that arrives after its attempt
// failed or its lease was given up is released. A server whose request
// failed after it may have been sent (a timeout) is released and barred
// for that attempt, for two TTLs: the request, still on its way or held
// by a stopped server, takes nothing when it lands, even after Unlock. A
// lease granted by a bare majority (the others failed) survives no loss
// among those servers: an extension never re-creates the lock where it is
// missing.
//
// A fencing number is the Redis server's clock in microseconds when it
// was drawn, or one above the lock's previous number if that is higher (a
// clock that went back): max(previous + 1, clock). So numbers strictly
// increase per lock name, with gaps (a waiter's ticket, see below, and a
// retried request use one up), and read as times. They fit an int64 (and
// a JSON number, exactly, until the year 2255).
//
// The fencing counter, which holds a lock's last number, is the one key
// that outlives its leases (a Redlock, which has no fences, keeps none).
// It is kept for a retention ([WithRetention], 7 days by default) and then
// created anew by the next acquisition, so that locks named per request
// leave nothing behind. Numbers keep increasing across the reset as long
// as the server's clock has not gone back since the last number.
//
// A failover, or a restart that reloads an older copy of the data, can set
// a counter back: its last numbers had not reached the replica (or the
// disk). The next number is still above every one drawn before, however
// fast the failover (a forced takeover, a replica promoted at once), since
// it is not below the new master's clock: fences never repeat as long as
// the new master's clock, when it draws its first number, is past the old
// master's when it drew its last. That is, the servers' clocks differ by
// less than the failover took, from the old master's last number to the
// new master's first: clocks that NTP keeps within a millisecond of each
// other meet it for any failover that takes longer (Sentinel and Cluster
// take seconds to fail a master over). (A counter also gets ahead of its
// server's clock if it draws more than one number a microsecond; a server
// runs one script at a time, for microseconds, so it never does.) A lease
// acquired with [WithReplicaAck] has its fence on the replicas that
// acknowledged it, so after a failover to one of them the next fence is
// above it, whatever the clocks. The condition excludes a split brain: an
// old master that still serves some clients after the new one took over
// (it stalled and came back before it learned of the failover) draws
// numbers beside it, from its own clock, and the two can hand out the
// same fence, or a later lease a lower one. With WithReplicaAck the old
// master's grants are refused (its replicas follow the new master and
// acknowledge nothing); without it, only fencing at the storage, or
// Redlock, holds then.
//
// # Waiting
//
// A blocked acquire does not poll. A waiter marks the lock as awaited, and
// the release of an awaited lock publishes a message on a channel in the
// lock's hash slot (sharded pub/sub on a Redis Cluster; a release nobody
// waits for publishes nothing). All waiters of a client share one
// subscription connection. Messages can be lost, so each wait is also
// bounded by the holder's remaining TTL.
//
// A plain [Mutex] hands itself over: each waiter holds a ticket (a number
// from the fencing counter), the lock remembers the oldest, and the
// release of an awaited lock reserves it for that ticket for 10 ms. So the
// process that just released it, one round trip ahead of everyone it woke,
// cannot take it back first, and across processes waiters are served
// roughly in arrival order. [WithFair] keeps a strict queue in Redis
// instead.
//
// # Deadlines
//
// Every call returns by its context's deadline (a blocking acquire that
// gives up may take up to 10 ms more, see below), provided the go-redis
// client honours it: create the client with ContextTimeoutEnabled set
// (redis.Options, redis.ClusterOptions, redis.RingOptions or
// redis.FailoverOptions). Without it go-redis bounds a round trip by its
// own read and write timeouts (3 s by default), whatever the context says.
// When an acquire's deadline passes with its request in flight, the
// request may still take the lock in Redis; the lock is then released in
// the background (bounded, at most 3 s each) instead of while the caller
// waits, so a stalled Redis costs the caller nothing past its deadline and
// leaves no lock behind once it answers again. (A caller whose context is
// still live, after a broken connection say, waits up to 5 ms for that
// release; one whose context is done does not wait, so a TryLock at once
// after it may still find the lock taken, for as long as the release
// takes.)
//
// A waiter that gives up (its context ends, or its wait timeout passes)
// takes back its claim before its call returns: a plain mutex's ticket, a
// place in a fair mutex's or a semaphore's queue, a waiting writer's hold
// on new readers, a waiting reader's place. That is one round trip, which
// the call waits for even past its deadline, up to 10 ms (not at all
// while the client's circuit is open, see below), so that the holder's
// release right after does not reserve the lock for a waiter that has
// left, and a TryLock then finds it free. A withdrawal that takes longer
// goes on in the background; a claim left behind lapses by itself (within
// the 10 ms hand-off grace, or one TTL for a place in a queue).
//
// Once a server of the client is found down (a refused dial, a broken
// connection or a call that times out makes the client's breaker PING its
// servers on connections of its own; one that refuses, or stays silent for
// half a second, is down), acquires, Extend and the queries on that client
// fail at once with [ErrUnavailable], which names the server (a circuit
// breaker shared with the dogpile caches on that client), until the
// server answers again; a call every 100 ms waits while it is asked. A
// busy client (an exhausted pool, short deadlines) opens nothing. Releases
// and the watchdog's renewals are never turned away. A Redlock bounds each
// server's round trip instead.
//
// A lock needs no Close: it starts no goroutine that outlives its calls,
// but for a lease's watchdog ([WithAutoExtend]), which Unlock stops, and
// the background release of an acquire whose reply was lost (bounded, see
// above).
//
// # Many goroutines
//
// While more than twice GOMAXPROCS acquires and releases of plain
// mutexes are in progress on one client, the next ones queue, one queue
// per server (a Cluster's master, a Ring's shard, so that a stopped
// master holds up only its own calls), and one goroutine per queue sends
// it as a pipeline, so that the client's and the server's system calls,
// most of what a call costs, are shared. Fewer go
// straight to Redis, as every other call does. A queued caller still
// returns by its context's deadline; one that gives up before its batch
// is sent is left out of it. go-redis hooks (tracing, metrics) see such
// calls as pipelines, under the context of the first caller still waiting
// when the batch is sent: its values, not its cancellation, and the latest
// of its callers' deadlines.
//
// # Observing
//
// [WithObserver] receives each acquisition (obtained or not, with its
// wait), extension, loss and release as an [Event]; the module
// github.com/dogpile-go/dogpile/dogpileotel records them as OpenTelemetry
// metrics. [WithLogger] logs lost leases and outages.
//
// # Guarantees and limits
//
// On one Redis server, a lock is held by at most one lease at a time, as
// long as the server keeps its data. Redis replication is asynchronous: a
// failover can lose a lock that was just acquired (with [WithReplicaAck],
// only a failover to a replica that did not acknowledge it can), and a
// restart without persistence loses all locks. Fencing numbers survive
// both, under the conditions above (see Lost leases and fencing); where a
// lost lock matters, have the storage refuse fences below the highest it
// has seen, or use a [Redlock].
//
// Every key a lock uses is derived from its name with a hash tag, so all of
// them live in one cluster slot and each operation is one atomic script
// (a [MultiMutex] runs one script per slot its names fall in).
// Scripts compute expiry only from relative durations and the server's
// clock (TIME inside the script, for the per-holder and per-waiter leases
// of semaphores and read locks); no client wall-clock time reaches Redis.
//
// # Fair queues
//
// A [Semaphore] and a fair [Mutex] queue their waiters in Redis, numbered
// by a server-side counter. Each waiter's place is a lease of one TTL that
// it renews while it waits, so a waiter that dies leaves the queue within
// one TTL; the script that grants permits drops expired places first. The
// waiter at the head is woken by a message on its own channel.
package lock
