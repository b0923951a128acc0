package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/hold"
	"github.com/dogpile-go/dogpile/internal/redisutil"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A MultiMutex names a set of mutexes that are locked together, all or
// nothing: "lock more than one entity at the same time". Each name is the
// [Mutex] of that name, so a MultiMutex excludes Mutex holders of any of
// its names, and each name keeps its own fencing counter ([Lease.Fences]).
//
// On a single Redis server, or when all names share a cluster hash slot,
// the whole set is taken by one atomic script. Across cluster slots, names
// are taken slot by slot in one global order (by slot, then by name) and,
// if a slot is busy, whatever was taken is released before waiting, so a
// MultiMutex never holds some names while it waits for others: two callers
// locking {a, b} and {b, a} cannot deadlock. In that case another process
// may briefly see some of the names locked by a caller that then backs off.
//
// A MultiMutex holds no state of its own and is safe for concurrent use.
// The zero value is not usable; create one with [NewMultiMutex].
type MultiMutex struct {
	client  redis.UniversalClient
	label   string   // the names, for errors
	names   []string // in lock order
	groups  [][]int  // indexes into names, one group per script
	mutexes []*Mutex // in lock order: their keys
	publish string
	opts    options
	invalid error // no names, or an empty one
}

// NewMultiMutex returns the lock over every name in names, in client's
// Redis. Duplicate names count once. It does no I/O. It panics if client
// is nil. No names, or an empty one, make every call return an error
// matching [ErrInvalid]. [WithFair] does not apply.
func NewMultiMutex(client redis.UniversalClient, names []string, opts ...Option) *MultiMutex {
	redisutil.MustClient("lock", client)
	o := buildOptions("multimutex", "", opts)
	o.fair = false
	mm := &MultiMutex{client: client, publish: wake.PublishCommand(client), opts: o}
	mm.opts.watch(client)
	if len(names) == 0 {
		mm.invalid = fmt.Errorf("%w: no lock names", ErrInvalid)
		return mm
	}
	if i := slices.Index(names, ""); i >= 0 {
		mm.invalid = fmt.Errorf("%w: lock name %d of %d is empty", ErrInvalid, i, len(names))
		return mm
	}
	for _, name := range names {
		mm.mutexes = append(mm.mutexes, NewMutex(client, name, opts...))
	}
	_, cluster := client.(*redis.ClusterClient)
	_, ring := client.(*redis.Ring)
	slot := func(m *Mutex) int {
		if cluster {
			return redisutil.Slot(m.lock)
		}
		return 0
	}
	// The one global order: every caller takes names in it.
	slices.SortFunc(mm.mutexes, func(a, b *Mutex) int {
		return cmp.Or(cmp.Compare(slot(a), slot(b)), strings.Compare(a.name, b.name))
	})
	mm.mutexes = slices.CompactFunc(mm.mutexes, func(a, b *Mutex) bool { return a.name == b.name })
	for i, m := range mm.mutexes {
		mm.names = append(mm.names, m.name)
		if n := len(mm.groups); n == 0 || ring || slot(m) != slot(mm.mutexes[i-1]) {
			mm.groups = append(mm.groups, nil)
		}
		mm.groups[len(mm.groups)-1] = append(mm.groups[len(mm.groups)-1], i)
	}
	mm.label = strings.Join(mm.names, ",")
	mm.opts.name = mm.label
	return mm
}

// Lock blocks until it holds every name or ctx is done (or the wait timeout
// passes, see [WithWaitTimeout]). It waits for a release of whichever name
// was busy last. On failure it returns an error matching [ErrNotObtained]
// and ctx.Err(), or a Redis error, and holds none of the names.
func (mm *MultiMutex) Lock(ctx context.Context) (*Lease, error) {
	if mm.invalid != nil {
		return nil, mm.invalid
	}
	token := redisutil.Token()
	busy := mm.mutexes[0].channel
	late := false // the last attempt was granted too late: token may hold every name
	l, err := acquireOn(ctx, mm.client, func() string { return busy }, &mm.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		l, retry, b, lt, err := mm.try(ctx, token, false, late)
		busy, late = b, lt
		return l, retry, err
	})
	if late && err != nil {
		// The next attempt would have renewed token's locks (see try); a
		// caller that leaves before it undoes them, or they would keep
		// every name from everyone for a TTL.
		mm.releaseLater(ctx, token, mm.groups)
	}
	return l, err
}

// TryLock makes one attempt to lock every name. It reports false, with a
// nil error, if any of them is held by another owner; it then holds none.
func (mm *MultiMutex) TryLock(ctx context.Context) (*Lease, bool, error) {
	if mm.invalid != nil {
		return nil, false, mm.invalid
	}
	return tryOnce(ctx, &mm.opts, func(ctx context.Context) (*Lease, time.Duration, error) {
		l, retry, _, _, err := mm.try(ctx, redisutil.Token(), true, false)
		return l, retry, err
	})
}

// try takes the groups in order. When one is busy it releases the groups
// taken before it and reports the busy name's wake-up channel. once says
// that no attempt with token follows (TryLock). late says that token's
// last attempt was granted too late: it may hold every group, so a busy
// or failed group releases them all, not just those taken before it (a
// waiter never holds some names while it waits for others). It reports
// whether this attempt was granted too late in turn.
func (mm *MultiMutex) try(ctx context.Context, token string, once, late bool) (l *Lease, retry time.Duration, busy string, grantedLate bool, err error) {
	taken := func(n int) [][]int { // what token may hold with groups[:n] taken by this attempt
		if late {
			return mm.groups
		}
		return mm.groups[:n]
	}
	sent := time.Now()
	fences := make(map[string]int64, len(mm.names))
	var top int64
	for gi, g := range mm.groups {
		keys := make([]string, 0, 3*len(g))
		for _, i := range g {
			m := mm.mutexes[i]
			keys = append(keys, m.lock, m.fence)
		}
		cmd, acked := mm.opts.script(ctx, mm.client, multiAcquire, keys, token, redisutil.Millis(mm.opts.ttl), mm.opts.retentionMs)
		res, err := cmd.Int64Slice()
		if err == nil && !acked && len(res) > 0 && res[0] == 1 {
			err = mm.opts.replicationErr() // undone below, with the groups before it
		}
		if foreign(err) {
			// Refused: by a lock key holding foreign data before anything
			// was written, or by a counter holding foreign data after this
			// group's earlier locks were set. Undo this group with the
			// groups before it.
			mm.releaseLater(ctx, token, taken(gi+1))
			return nil, 0, "", false, mm.opts.foreign("acquire", mm, err)
		}
		if err != nil {
			// This group's script may have run: undo it with the others.
			mm.releaseLater(ctx, token, taken(gi+1))
			return nil, 0, "", false, mm.opts.failed(ctx, "acquire", err)
		}
		if len(res) > 0 && res[0] == multiForeign {
			mm.releaseLater(ctx, token, taken(gi))
			return nil, 0, "", false, mm.opts.foreign("acquire", mm.mutexes[g[res[1]-1]], errNoTTL)
		}
		if res[0] == 0 {
			// Back off before waiting. If that fails, the next attempt
			// must not meet a late release of its own token: the caller
			// gets the error, and the rollback runs in the background.
			if held := taken(gi); len(held) > 0 {
				if err := mm.releaseGroups(ctx, token, held); err != nil {
					mm.releaseLater(ctx, token, held)
					return nil, 0, "", false, mm.opts.failed(ctx, "back off", err)
				}
			}
			return nil, retryAfter(res[2], &mm.opts), mm.mutexes[g[res[1]-1]].channel, false, nil
		}
		for j, i := range g {
			fences[mm.names[i]] = res[j+1]
			top = max(top, res[j+1])
		}
	}
	if hold.Late(sent, mm.opts.ttl) {
		// Granted past its safe deadline (see ask.grant): the next attempt,
		// with the same token, renews the locks if they are still ours; a
		// single attempt has none, and undoes them.
		if once {
			mm.releaseLater(ctx, token, mm.groups)
		}
		return nil, time.Millisecond, "", true, nil
	}
	l = newLease(mm, mm.label, token, top, sent, &mm.opts)
	l.fences = fences
	return l, 0, "", false, nil
}

// releaseLater rolls back token's hold on groups in the background.
func (mm *MultiMutex) releaseLater(ctx context.Context, token string, groups [][]int) {
	redisutil.Rollback(ctx, func(ctx context.Context) { _ = mm.releaseGroups(ctx, token, groups) })
}

func (mm *MultiMutex) releaseGroups(ctx context.Context, token string, groups [][]int) error {
	_, err := mm.releaseCount(ctx, token, groups)
	return err
}

func (mm *MultiMutex) releaseCount(ctx context.Context, token string, groups [][]int) (int, error) {
	var errs []error
	total := 0
	for _, g := range groups {
		keys := make([]string, 0, 2*len(g))
		for _, i := range g {
			keys = append(keys, mm.mutexes[i].lock, mm.mutexes[i].channel)
		}
		n, err := multiRelease.Run(ctx, mm.client, keys, token, mm.publish, graceArg).Int()
		total += n
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

func (mm *MultiMutex) locks(g []int) []string {
	keys := make([]string, len(g))
	for j, i := range g {
		keys[j] = mm.mutexes[i].lock
	}
	return keys
}

// multiForeign is multiAcquire's first reply for a key of foreign data.
const multiForeign = -1

func (mm *MultiMutex) where() string {
	var keys []string
	for _, m := range mm.mutexes {
		keys = append(keys, m.lock)
	}
	return keyList(keys...)
}

// release frees every name; it reports true only if all were still held.
func (mm *MultiMutex) release(ctx context.Context, token string) (bool, error) {
	n, err := mm.releaseCount(ctx, token, mm.groups)
	return n == len(mm.names), err
}

// extend renews every group; one group that lost a name loses the lease.
func (mm *MultiMutex) extend(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	for _, g := range mm.groups {
		held, err := mm.opts.extended(mm.opts.script(ctx, mm.client, multiExtend, mm.locks(g), token, redisutil.Millis(ttl)))
		if err != nil || !held {
			return false, err
		}
	}
	return true, nil
}

func (mm *MultiMutex) pttl(ctx context.Context, token string) (time.Duration, error) {
	least := time.Duration(-1)
	for _, g := range mm.groups {
		d, err := pttlReply(multiPTTL.Run(ctx, mm.client, mm.locks(g), token).Int64())
		if err != nil {
			return 0, err
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return least, nil
}
