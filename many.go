package dogpile

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FetchMany returns the values cached under keys, computing the missing
// ones with one call of compute per FetchMany: a batch Fetch, with the same
// fleet-wide guarantee per key (each missing key is computed once across
// every process that shares the Redis server or cluster).
//
// The hits are read in one round trip (on a cluster, one per node, sent in
// parallel). The missing keys take the compute lock in one more round trip
// (a script per cluster slot). compute is then called once, with exactly
// the keys this process won: never a key that another process is computing,
// nor one that a Fetch or FetchMany of this process is computing (those
// are awaited, as Fetch awaits them: woken by Redis when the value is
// stored, each wait bounded by the holder's lease, so a holder that died is
// taken over). A key taken over that way is computed by a later call of
// compute, with that key alone. One lease renewal runs for the whole
// batch while compute runs.
//
// compute returns the values it found, by key, on a context detached from
// the caller's (as for Fetch). Its values are stored for ttl, each in a
// write fenced by its own lock, and the processes waiting for them are
// woken. A key that compute leaves out of its map does not exist: it is
// absent from FetchMany's result, with no error, and with [WithNegativeTTL]
// remembered as a tombstone (so is a key whose tombstone is cached). [SetTTL]
// in compute applies to every value of that call. Keys of the map that were
// not asked for are ignored.
//
// If compute returns an error (or panics), the keys it was computing fail:
// nothing is stored for them, and processes waiting for them get
// [ErrComputeFailed]. FetchMany returns every value it has, and an error
// that joins (errors.Join) one error per key that failed, each naming its
// key; a key that failed is absent from the map. [WithStale] and
// [WithEarlyRefresh] apply to each key as in Fetch, a background refresh
// calling compute with that key alone.
//
// Duplicate keys are fetched once. An empty keys returns an empty map and
// does no I/O. An empty key or a ttl below a millisecond returns a nil map
// and an error matching [ErrInvalid]. If ctx is done first, FetchMany
// returns what it has with ctx.Err(). FetchMany panics if compute is nil, a
// programmer error.
func (c *Cache[T]) FetchMany(ctx context.Context, keys []string, ttl time.Duration,
	compute func(ctx context.Context, missing []string) (map[string]T, error)) (map[string]T, error) {
	if compute == nil {
		panic("dogpile: nil compute function (a programmer error)")
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: ttl %v is below 1ms", ErrInvalid, ttl)
	}
	pending, err := uniqueKeys(keys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]T, len(pending))
	var errs []error
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		ws := c.startMany(ctx, pending, ttl, compute)
		if pending, errs, err = c.collect(ctx, ws, out, errs); err != nil {
			return out, err
		}
	}
	return out, errors.Join(errs...)
}

// A manyFunc is FetchMany's compute.
type manyFunc[T any] func(ctx context.Context, missing []string) (map[string]T, error)

// uniqueKeys returns keys without duplicates, in order, or an error naming
// an empty key.
func uniqueKeys(keys []string) ([]string, error) {
	seen := make(map[string]struct{}, len(keys))
	out := make([]string, 0, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("%w: key %d of %d is empty", ErrInvalid, i, len(keys))
		}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out, nil
}

// A want is one key of a FetchMany and the flight that answers it.
type want[T any] struct {
	key   string
	cl    *call
	ended bool    // r holds the answer already: this FetchMany led the flight and ended it
	r     outcome // if ended
	v     T       // if decoded
	// decoded: v is r.b decoded (a hit read by this FetchMany), so that a
	// hit is decoded once.
	decoded bool
}

// end ends the flight that w leads with r.
func (w *want[T]) end(c *Cache[T], r outcome) {
	c.flights.end(w.key, w.cl, r)
	w.ended, w.r = true, r
}

// hit ends the flight that w leads with a value read at once: v decoded
// from r.b, with meta m.
func (w *want[T]) hit(c *Cache[T], v T, m meta, r read) {
	w.end(c, outcome{b: r.b, hit: true, stale: c.opts.stale > 0 && r.pttl >= 0 && r.pttl <= c.opts.stale})
	w.v, w.decoded = v, !m.notFound
}

// startMany joins or starts the flight of each key (see Fetch): the keys
// whose flight this FetchMany leads are read at once, and the missing ones
// start their miss in the background.
func (c *Cache[T]) startMany(ctx context.Context, keys []string, ttl time.Duration, compute manyFunc[T]) []want[T] {
	ws := make([]want[T], len(keys))
	var lead []*want[T]
	for i, k := range keys {
		cl, l := c.flights.join(k)
		ws[i] = want[T]{key: k, cl: cl}
		if l {
			lead = append(lead, &ws[i])
		} else {
			c.stats.shared.Add(1)
		}
	}
	if len(lead) > 0 {
		c.leadMany(ctx, lead, ttl, compute)
	}
	return ws
}

// collect waits for the answer of each want and puts it in out, or its
// error in errs. It returns the keys to look for again: those whose flight
// was abandoned by a Fetch that led it (see errRetry). When ctx ends first,
// it leaves the flights it still waits for and returns ctx.Err().
func (c *Cache[T]) collect(ctx context.Context, ws []want[T], out map[string]T, errs []error) (again []string, _ []error, _ error) {
	for i := range ws {
		w := &ws[i]
		if !w.ended {
			select {
			case <-w.cl.done:
				w.r = w.cl.outcome
			case <-ctx.Done():
				for _, w := range ws[i:] {
					if !w.ended {
						c.flights.leave(w.key, w.cl)
					}
				}
				return nil, errs, ctx.Err()
			}
		}
		if w.r.err == errRetry {
			again = append(again, w.key)
			continue
		}
		c.count(ctx, w.key, w.r)
		if w.decoded {
			out[w.key] = w.v
			continue
		}
		if err := c.answer(w.key, w.r, out); err != nil {
			errs = append(errs, err)
		}
	}
	return again, errs, nil
}

// answer puts the value of key in r, if any, into out. It returns r's
// error, naming key, unless it only says that key does not exist.
func (c *Cache[T]) answer(key string, r outcome, out map[string]T) error {
	if r.b != nil {
		v, m, err := c.decodeEntry(r.b)
		switch {
		case err != nil: // cannot happen: the flight decoded b already
			return fmt.Errorf("dogpile: decode %q: %w", key, err)
		case !m.notFound:
			out[key] = v
		}
	}
	if r.err == nil || errors.Is(r.err, ErrNotFound) {
		return nil
	}
	if strings.Contains(r.err.Error(), strconv.Quote(key)) {
		return r.err // the flight's errors mostly name their key already
	}
	return fmt.Errorf("dogpile: %q: %w", key, r.err)
}
