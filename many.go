package dogpile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// FetchMany is a batch [Cache.Fetch], with its guarantees per key: compute is
// called once, on a context like Fetch's, with exactly the missing keys this
// process won the lock for (the others are awaited). Each value it returns is
// stored for ttl ([SetTTL] sets all); a key it leaves out is absent from the
// result, with no error (a tombstone with [WithNegativeTTL]); keys not asked
// for are ignored. If compute fails or panics, FetchMany returns the values it
// has and an errors.Join of one error per failed key, naming it; if ctx ends
// first, what it has and ctx.Err(). Duplicate keys are fetched once; no keys
// give an empty map without I/O. An empty key or a ttl below a millisecond
// returns a nil map and an error matching [ErrInvalid]; a nil compute panics.
func (c *Cache[T]) FetchMany(ctx context.Context, keys []string, ttl time.Duration,
	compute func(ctx context.Context, missing []string) (map[string]T, error)) (map[string]T, error) {
	if compute == nil {
		panic("dogpile: nil compute function (a programmer error)")
	}
	if c.life.Done() {
		return nil, ErrClosed
	}
	ttl, err := c.validTTL(ttl, "")
	if err != nil {
		return nil, err
	}
	pending, err := uniqueKeys(keys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]T, len(pending))
	if len(pending) == 0 {
		// No I/O: not even a breaker probe, which an empty pipeline would
		// report as Redis reachable.
		return out, nil
	}
	misses, errs, err := c.hits(ctx, pending, ttl, compute, out)
	for err == nil && len(misses) > 0 {
		ws := c.joinMisses(ctx, misses, ttl, compute)
		misses, errs, err = c.collect(ctx, ws, out, errs)
	}
	if err != nil {
		return out, err
	}
	return out, errors.Join(errs...)
}

// uniqueKeys returns keys without duplicates, in order, or an error naming
// an empty key.
func uniqueKeys(keys []string) ([]string, error) {
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for i, k := range keys {
		if k == "" { // see checkKey; counted from 1, as a reader counts
			return nil, fmt.Errorf("%w: key %d of %d is empty", ErrInvalid, i+1, len(keys))
		}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out, nil
}

// hits answers every key it can from the near tier, reads the others in
// one round trip (per node) and puts the values found into out (and into
// the near tier), starting background refreshes where due. It returns the
// keys to compute or wait for, and the errors of keys that failed. Hits do
// not join the in-process flights (so concurrent batches of the same hot
// keys never queue behind one another's reads); only misses do.
func (c *core[T]) hits(ctx context.Context, keys []string, ttl time.Duration, compute manyFunc[T], out map[string]T) ([]missing, []error, error) {
	keys, vks := c.nearMany(ctx, keys, out)
	if len(keys) == 0 {
		return nil, nil, nil
	}
	tks := make([]near.Ticket, len(vks))
	for i, vk := range vks {
		tks[i] = c.near.Ticket(vk) // before the read: an invalidation during it bars the value
	}
	rs := c.readMany(ctx, vks)
	var misses []missing
	var errs []error
	for i, k := range keys {
		r, bad, down := rs[i], "", false
		switch {
		case r.err == nil:
			v, m, derr := c.decodeEntry(r.b)
			if derr != nil {
				c.decodeError(ctx, k, derr)
				bad = entry.SHA1(r.b)
				break
			}
			c.near.Put(vks[i], tks[i], r.owner, r.b, m, r.pttl)
			stale := !m.NotFound && c.stale(r.pttl)
			c.emitRead(ctx, Event{Kind: EventHit, Key: k, Stale: stale, NotFound: m.NotFound}, r.b, stale, false)
			if !m.NotFound {
				out[k] = v
			}
			if limit, ok := c.due(r.pttl, m); ok {
				j := newJob(flightID{Kind: laterFlight, Key: vks[i]}, k, ttl, one(k, compute), nil)
				j.prev = r.b
				c.refreshLater(ctx, j, limit)
			}
			continue
		case r.err == redis.Nil:
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case c.opts.computeIfDown && unreachable(r.err):
			down = true
		default:
			errs = append(errs, redisutil.Failed(ctx, "dogpile", "get", k, r.err))
			continue
		}
		misses = append(misses, missing{key: k, vk: vks[i], bad: bad, down: down, tracked: r.owner != nil, tk: tks[i]})
	}
	return misses, errs, nil
}

// nearMany answers the keys it can from the near tier into out, and
// returns the others with their value keys.
func (c *core[T]) nearMany(ctx context.Context, keys []string, out map[string]T) (rest, vks []string) {
	vks = make([]string, 0, len(keys))
	if c.near == nil {
		for _, k := range keys {
			vks = append(vks, c.valueKey(k))
		}
		return keys, vks
	}
	rest = make([]string, 0, len(keys))
	for _, k := range keys {
		vk := c.valueKey(k)
		v, err, ok := c.nearHit(ctx, k, vk, false)
		switch {
		case !ok:
			rest, vks = append(rest, k), append(vks, vk)
		case err == nil:
			out[k] = v
		}
	}
	return rest, vks
}

// collect waits for the flight of each want and puts its value in out, or
// its error in errs. It returns the keys to look for again: those whose flight
// was abandoned by a Fetch that led it (see errRetry). When ctx ends first,
// it leaves the flights it still waits for and returns ctx.Err().
func (c *core[T]) collect(ctx context.Context, ws []want, out map[string]T, errs []error) (again []missing, _ []error, _ error) {
	for i, w := range ws {
		select {
		case <-w.cl.Done():
		case <-ctx.Done():
			for _, w := range ws[i:] {
				c.flights.Leave(flightID{Kind: fetchFlight, Key: w.vk}, w.cl)
			}
			return nil, errs, ctx.Err()
		}
		if w.cl.Result.err == errRetry {
			again = append(again, w.missing)
			continue
		}
		nf, err := c.answer(w.key, w.cl.Result, out)
		c.count(ctx, w.key, w.cl.Result, nf)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return again, errs, nil
}

// answer puts the value of key in r, if any, into out, and reports whether
// r says that key does not exist. It returns r's error, naming key, unless
// it only says that.
func (c *core[T]) answer(key string, r outcome, out map[string]T) (notFound bool, err error) {
	if r.b != nil {
		v, m, err := c.decodeEntry(r.b)
		switch {
		case err != nil: // cannot happen: the flight decoded b already
			return false, fmt.Errorf("dogpile: decode %q: %w", key, err)
		case !m.NotFound:
			out[key] = v
		}
		notFound = m.NotFound
	}
	if r.err == nil || errors.Is(r.err, ErrNotFound) {
		return notFound || r.err != nil, nil
	}
	if strings.Contains(r.err.Error(), strconv.Quote(key)) {
		return false, r.err // the flight's errors mostly name their key already
	}
	return false, fmt.Errorf("dogpile: %q: %w", key, r.err)
}

// readManyRedis is readMany's round trip on rc, behind the circuit
// breaker: an MGET per slot group, and a PTTL per key if the remaining
// TTLs are needed and cannot be read from the entries (see readRedis). It
// returns the pipeline's first error; each key has its own in rs.
func (c *core[T]) readManyRedis(ctx context.Context, rc redis.Cmdable, vks []string, rs []read) error {
	groups := redisutil.SlotGroups(c.client, vks, maxGroup)
	gets := make([]*redis.SliceCmd, len(groups))
	var pttls []*redis.DurationCmd
	fromEntry := false
	if f := c.fresh; f != nil {
		if fromEntry = c.readyClock() && !f.PTTLFirst.Load(); !fromEntry {
			pttls = make([]*redis.DurationCmd, len(vks))
		}
	}
	err := redisutil.Pipelined(ctx, rc, func(p redis.Pipeliner) {
		for gi, g := range groups {
			ks := vks // a single server: one group, every key in order
			if len(g) != len(vks) {
				ks = make([]string, len(g))
				for n, i := range g {
					ks[n] = vks[i]
				}
			}
			gets[gi] = p.MGet(ctx, ks...)
		}
		for i := range pttls {
			pttls[i] = p.PTTL(ctx, vks[i])
		}
	})
	for gi, g := range groups {
		vals, gerr := gets[gi].Result()
		for n, i := range g {
			r := &rs[i]
			r.pttl = -1
			switch {
			case gerr != nil:
				r.err = gerr
			case vals[n] == nil:
				r.err = redis.Nil
			default:
				s, _ := vals[n].(string)
				r.b = []byte(s)
			}
			if pttls != nil && r.err == nil {
				if c.fresh.PTTLFirst.Load() && entry.Deadline(r.b) != 0 {
					c.fresh.PTTLFirst.Store(false)
				}
				if d, err := pttls[i].Result(); err == nil && d >= 0 {
					r.pttl = d // a value without a TTL is never stale
				}
			}
		}
	}
	if fromEntry {
		c.entryTTLs(ctx, rc, vks, rs)
	}
	return err
}

// entryTTLs sets the remaining TTL of each value read in rs from its entry,
// and reads the PTTLs of those whose entry cannot tell, in one more round
// trip.
func (c *core[T]) entryTTLs(ctx context.Context, rc redis.Cmdable, vks []string, rs []read) {
	var ask []int
	for i := range rs {
		if rs[i].err != nil {
			continue
		}
		if d, ok := c.fresh.Remaining(rs[i].b); ok {
			rs[i].pttl = d
		} else {
			ask = append(ask, i)
		}
	}
	if len(ask) == 0 {
		return
	}
	c.fresh.PTTLFirst.Store(true)
	cmds := make([]*redis.DurationCmd, len(ask))
	_ = redisutil.Pipelined(ctx, rc, func(p redis.Pipeliner) {
		for n, i := range ask {
			cmds[n] = p.PTTL(ctx, vks[i])
		}
	})
	for n, i := range ask {
		if d, err := cmds[n].Result(); err == nil && d >= 0 {
			rs[i].pttl = d // a value without a TTL is never stale
		}
	}
}
