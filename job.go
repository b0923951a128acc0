package dogpile

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/flight"
	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/near"
)

// What flights carry: a flight's name and its shared call, the job of one
// key's miss, the batch's records, and what a compute says of its result
// (SetTTL, Tag). The flight group (internal/flight) and the runner (run.go) work
// on them.

// A job is one key's miss in one process: what to compute and where to
// store it.
type job[T any] struct {
	flight  flightID // the flight the job serves
	key     string
	ks      keyspace.Keys
	ttl     time.Duration
	compute func(context.Context) (T, error)
	cl      *call    // the flight the result goes to
	refresh bool     // a background refresh (see refreshLater)
	first   []any    // FetchMany's lock reply for key (never "locked"), to start the miss from
	m       *miss[T] // the miss begun by Fetch's first look, with its reply (see lookWithScript)
	prev    []byte   // the entry of the value compute replaces, if known (see Previous)

	// How the miss starts (see Cache.runMiss).
	bad   string // SHA1 of stored bytes that did not decode, or ""
	down  bool   // Redis is unreachable and WithComputeWhenDown is set: compute without it
	force bool   // Refresh's: compute even if a value is there
}

// newJob is the job of key's miss in flight id, whose result goes to cl (nil
// for a background refresh, whose flight refreshLater starts). Every
// job starts here; how the miss starts (bad, down, force) is set after.
func newJob[T any](id flightID, key string, ttl time.Duration, compute func(context.Context) (T, error), cl *call) *job[T] {
	return &job[T]{flight: id, key: key, ks: keyspace.For(id.Key), ttl: ttl, compute: compute, cl: cl}
}

// A read is one key's answer in a batch read.
type read struct {
	b    []byte
	pttl time.Duration // remaining TTL, when freshness options need it; -1: not read, or none
	err  error         // redis.Nil: no value
	// owner is, with the near tier, the Owner of b when it was read on a
	// tracked connection (see near.Owner).
	owner *near.Owner
}

// A manyFunc is FetchMany's compute.
type manyFunc[T any] func(ctx context.Context, missing []string) (map[string]T, error)

// A missing is a key that FetchMany did not find.
type missing struct {
	key, vk string
	bad     string // SHA1 of stored bytes that did not decode, or ""
	down    bool   // Redis is unreachable and WithComputeWhenDown is set
	tracked bool   // read on a near tier's tracked connection
	tk      near.Ticket
}

// A want is a missing key of a FetchMany and the flight that answers it.
type want struct {
	missing
	cl *call
}

// A call is one flight: the work for one key shared by the concurrent
// Fetch calls of one process; it ends with an outcome.
type call = flight.Call[outcome]

// An outcome is how a flight ended.
type outcome struct {
	b     []byte // the encoded entry, if any
	v     any    // a computed T that could not be encoded (with err), else nil
	err   error
	hit   bool // found by the first look (a GET, or the lock script: see looks)
	stale bool // past its TTL: served while a refresh runs (WithStale)
}

// A flightID names a flight: a Fetch's (or FetchMany's) of a key, a
// Refresh's, or a background refresh's, by the key's value key (see
// valueKey), the name that writes and invalidations come with.
type flightID = flight.ID

// SetTTL, called by a compute with its context, stores the value it returns for
// ttl, not Fetch's (an upstream's max-age, say), plus the stale window; a
// not-found result keeps [WithNegativeTTL]'s. A ttl of zero or less hands the
// value to every waiting caller, in every process, unstored. The last call
// wins; on a context not from a compute, SetTTL does nothing.
func SetTTL(ctx context.Context, ttl time.Duration) {
	if ro, ok := ctx.Value(resultKey{}).(*resultOpts); ok {
		ro.set(ttl)
	}
}

// Tag, called by a compute with its context, tags the value it returns (each
// one of a FetchMany) for [Cache.InvalidateTag]. Call it before reading the
// source: an InvalidateTag begun after Tag returned voids the value, even
// stored later. If Tag cannot read the tags from Redis, the value is returned
// uncached. Empty tags, and calls on a context not from a compute, are ignored.
func Tag(ctx context.Context, tags ...string) {
	if ro, ok := ctx.Value(resultKey{}).(*resultOpts); ok && ro.epochs != nil {
		ro.tag(ctx, tags)
	}
}

// Previous, called by a compute with its context, returns the value it
// replaces, if this process knows it: the one a background refresh or a
// [Cache.Refresh] found. It returns false on a first fill, after a not-found
// tombstone, in a FetchMany's compute, and on a context that did not come from
// a compute of a Cache[T].
func Previous[T any](ctx context.Context) (T, bool) {
	var zero T
	ro, ok := ctx.Value(resultKey{}).(*resultOpts)
	if !ok || ro.prev == nil {
		return zero, false
	}
	v, ok := ro.prev()
	t, isT := v.(T)
	return t, ok && isT
}

type resultKey struct{}

// resultOpts holds what compute said about its result. compute may call
// SetTTL and Tag from any goroutine, hence the mutex.
type resultOpts struct {
	mu  sync.Mutex
	ttl time.Duration
	ok  bool

	tags   []string // see Tag, in the order given
	seen   []string // each tag's epoch when it was tagged
	vouch  bool     // false once an epoch could not be read
	epochs func(ctx context.Context, tags []string) ([]string, error)
	lease  *hold.Clock // the compute lock's, once compute may run (see tag)

	// prev returns the value compute replaces, decoded, if one is known
	// (see Previous); nil if none is.
	prev func() (any, bool)

	// named holds every tag given to Tag, published before its epoch is
	// read, so that an InvalidateTag in this process can drop the flight
	// of the compute without waiting for mu (see group.forgetTagged).
	named atomic.Pointer[[]string]
}

// taggedWith reports whether compute gave its result any of tags.
func (r *resultOpts) taggedWith(tags []string) bool {
	named := r.named.Load()
	return named != nil && slices.ContainsFunc(tags, func(t string) bool { return slices.Contains(*named, t) })
}

// tag adds the new ones of tags, with their epochs.
func (r *resultOpts) tag(ctx context.Context, tags []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fresh []string
	for _, t := range tags {
		if t != "" && !slices.Contains(r.tags, t) && !slices.Contains(fresh, t) {
			fresh = append(fresh, t)
		}
	}
	if len(fresh) == 0 {
		return
	}
	named := append(slices.Clone(r.tags), fresh...)
	r.named.Store(&named)
	e, err := r.read(ctx, fresh)
	if err != nil {
		r.vouch = false
		e = make([]string, len(fresh))
	}
	r.tags, r.seen = append(r.tags, fresh...), append(r.seen, e...)
}

// read reads the epochs of tags. A read still stuck when the lease may be
// lost is cut then, at the lease's safe deadline (with
// ContextTimeoutEnabled, which puts a context's deadline on the socket;
// go-redis does not cut a read when compute's context is cancelled):
// compute, told by its context that it lost the lock, must be free to
// stop, for another process may compute by then. A read cut at a deadline
// that a renewal has moved since is sent again: the lease still holds.
func (r *resultOpts) read(ctx context.Context, tags []string) ([]string, error) {
	for {
		if r.lease == nil {
			return r.epochs(ctx, tags)
		}
		d := r.lease.Deadline()
		rctx, cancel := context.WithDeadline(ctx, d)
		e, err := r.epochs(rctx, tags)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().Before(d) || r.lease.Err() != nil {
			return e, err
		}
	}
}

// tagged returns the tags of the result with the epochs seen, and whether
// the cache can vouch for them.
func (r *resultOpts) tagged() (tags, seen []string, vouch bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tags, r.seen, r.vouch
}

func (r *resultOpts) set(ttl time.Duration) {
	r.mu.Lock()
	r.ttl, r.ok = ttl, true
	r.mu.Unlock()
}

func (r *resultOpts) get() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ttl, r.ok
}

const (
	fetchFlight   = flight.Fetch   // Fetch and FetchMany: they share flights
	refreshFlight = flight.Refresh // Refresh: computes even over a value
	laterFlight   = flight.Later   // a background refresh (stale or early)
)

// A nearSample is a near hit to check: its key, and the entry it served,
// known by the sum of its bytes and its deadline in the tier (the same
// bytes read twice are two entries).
type nearSample struct {
	key, vk string
	sum     uint32
	until   int64
}

// A sourceSample is a hit to check against the source: its key, and what
// it served, the entry read from Redis (b), or a near hit's value, its
// tombstone flag, and its entry's sum.
type sourceSample[T any] struct {
	key, vk  string // vk is "" for a hit read from Redis: the check derives it
	b        []byte
	near     bool
	v        T // shared with the tier's callers: read-only
	notFound bool
	sum      uint32
}

// checks are a Cache's checkers; nil without WithConsistencySampling (and
// a near tier) or WithSourceCheck.
type checks[T any] struct {
	limit  uint64                          // the larger checker's limit: a hit whose mix is above goes no further
	near   *check.Checker[nearSample]      // WithConsistencySampling; nil: off
	source *check.Checker[sourceSample[T]] // WithSourceCheck; nil: off
	verify func(ctx context.Context, key string) (T, error)
}
