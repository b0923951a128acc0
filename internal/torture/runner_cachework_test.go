package torture

// runner_cachework_test.go is a worker's cache goroutine: a random mix
// of Fetch, FetchMany, Refresh, Set, Delete and Get on a small key space,
// and the compute functions, which draw each value's version from the
// oracle.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile"
)

const (
	// maxCompute is the longest a compute function takes.
	maxCompute = 30 * time.Millisecond
	// failPercent and notFoundPercent are how often a compute fails or
	// finds nothing; FetchMany's finds nothing for each key as often.
	failPercent     = 4
	notFoundPercent = 8
	// maxThink is the longest pause between two calls of a goroutine.
	maxThink = 5 * time.Millisecond
	// failPause is the pause after a call that failed: while Redis is
	// down, calls fail at once, and would fill the ledger.
	failPause = 20 * time.Millisecond
)

// errComputeFailed is a compute's failure.
var errComputeFailed = errors.New("torture: compute failed")

// cacheLoop makes random cache calls until ctx is done.
func (w *worker) cacheLoop(ctx context.Context, g int) {
	r := w.rng(g)
	for ctx.Err() == nil {
		cfg := r.IntN(len(w.caches))
		key := fmt.Sprintf("k%d", r.IntN(w.plan.Keys))
		var op *Op
		switch x := r.IntN(100); {
		case x < 40:
			op = w.fetch(g, cfg, key, r.Uint64())
		case x < 52:
			op = w.fetchMany(g, cfg, w.someKeys(r), r.Uint64())
		case x < 60:
			op = w.refresh(g, cfg, key, r.Uint64())
		case x < 72:
			op = w.set(g, cfg, key, r.IntN(2) == 0)
		case x < 76:
			op = w.delete(g, cfg, key)
		case x < 79:
			op = w.expire(g, cfg, key)
		case x < 82:
			op = w.invalidate(g, cfg, tagOf(key))
		default:
			op = w.get(g, cfg, key)
		}
		think := time.Duration(r.Int64N(int64(maxThink)))
		if op.Err != "" {
			think += failPause
		}
		sleep(ctx, think)
	}
}

// tagOf returns key's tag: "g0" for even-numbered keys, "g1" for odd.
func tagOf(key string) string {
	n, _ := strconv.Atoi(strings.TrimPrefix(key, "k"))
	return fmt.Sprintf("g%d", n%2)
}

// invalidate invalidates tag.
func (w *worker) invalidate(g, cfg int, tag string) *Op {
	op := w.newOp(g, KInval, cfg)
	op.Tags = []string{tag}
	w.led.Write(op)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	w.end(op, w.caches[cfg].InvalidateTag(ctx, tag))
	return op
}

// someKeys returns 2 to 4 distinct keys.
func (w *worker) someKeys(r *rand.Rand) []string {
	n := 2 + r.IntN(min(3, w.plan.Keys-1))
	var keys []string
	for _, i := range r.Perm(w.plan.Keys)[:n] {
		keys = append(keys, fmt.Sprintf("k%d", i))
	}
	return keys
}

func (w *worker) fetch(g, cfg int, key string, seed uint64) *Op {
	op := w.begin(g, KFetch, cfg, key)
	timeout := opTimeout
	if w.plan.Caches[cfg].StaleIfDown {
		timeout = downTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var down atomic.Bool
	ctx = context.WithValue(ctx, downKey{}, &down)
	v, err := w.caches[cfg].Fetch(ctx, key, w.ttl(cfg, seed), w.compute(g, cfg, key, op, seed))
	op.Down = down.Load()
	w.endRead(op, key, v, err)
	return op
}

// downKey is the key of a Fetch's context under which markDown records
// that the Fetch was answered with a copy kept WithStaleIfDown.
type downKey struct{}

// markDown, every Cache's observer, marks the Fetch that the near tier
// answers with a kept copy: the only hit that is both near and stale.
func markDown(ctx context.Context, e dogpile.Event) context.Context {
	if e.Kind == dogpile.EventHit && e.Near && e.Stale {
		if down, ok := ctx.Value(downKey{}).(*atomic.Bool); ok {
			down.Store(true)
		}
	}
	return nil
}

func (w *worker) refresh(g, cfg int, key string, seed uint64) *Op {
	op := w.begin(g, KRefresh, cfg, key)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	v, err := w.caches[cfg].Refresh(ctx, key, w.ttl(cfg, seed), w.compute(g, cfg, key, op, seed))
	w.endRead(op, key, v, err)
	return op
}

func (w *worker) get(g, cfg int, key string) *Op {
	op := w.begin(g, KGet, cfg, key)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	v, err := w.caches[cfg].Get(ctx, key)
	if errors.Is(err, dogpile.ErrMiss) {
		w.end(op, nil) // no version: nothing to check but the time
		return op
	}
	w.endRead(op, key, v, err)
	return op
}

// endRead ends a read of key that returned v and err: a version, "not
// found", or an error (with the version, if a value came with it).
func (w *worker) endRead(op *Op, key string, v Value, err error) {
	op.Vers = map[string]int64{}
	switch {
	case errors.Is(err, dogpile.ErrNotFound):
		op.Vers[key] = NotFound
		err = nil
	case v.V != 0:
		op.Vers[key] = v.V
		if v.K != key {
			op.Err = fmt.Sprintf("torture: %q answered with the value of %q", key, v.K)
		}
	}
	w.end(op, err)
}

func (w *worker) fetchMany(g, cfg int, keys []string, seed uint64) *Op {
	op := w.begin(g, KFetchMany, cfg, keys...)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	m, err := w.caches[cfg].FetchMany(ctx, keys, w.ttl(cfg, seed), w.computeMany(g, cfg, op, seed))
	op.Vers = map[string]int64{}
	var wrong []string
	for _, k := range keys {
		v, ok := m[k]
		switch {
		case ok:
			op.Vers[k] = v.V
			if v.K != k {
				wrong = append(wrong, fmt.Sprintf("%q answered with the value of %q", k, v.K))
			}
		case err == nil:
			// Absent with no error: compute left it out, or a tombstone.
			op.Vers[k] = NotFound
		}
	}
	if len(wrong) > 0 {
		op.Err = fmt.Sprintf("torture: %v", wrong)
	}
	w.end(op, err)
	return op
}

// set stores a new version of key, tagged or not.
func (w *worker) set(g, cfg int, key string, tagged bool) *Op {
	op := w.newOp(g, KSet, cfg, key)
	ver, err := w.draw(1)
	if err != nil {
		w.led.Write(op)
		w.end(op, err)
		return op
	}
	op.Vers = map[string]int64{key: ver}
	w.led.Write(op)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	v, ttl := Value{K: key, V: ver, P: w.proc, G: g}, w.ttl(cfg, uint64(ver))
	if tagged {
		op.Tags = []string{tagOf(key)}
		w.end(op, w.caches[cfg].SetTagged(ctx, key, v, ttl, op.Tags...))
		return op
	}
	w.end(op, w.caches[cfg].Set(ctx, key, v, ttl))
	return op
}

func (w *worker) expire(g, cfg int, key string) *Op {
	op := w.begin(g, KExpire, cfg, key)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	w.end(op, w.caches[cfg].Expire(ctx, key))
	return op
}

// ttl is the TTL a call of Cache cfg passes: the Cache's, or for one call
// in two (by seed) 0, which WithDefaultTTL makes the same.
func (w *worker) ttl(cfg int, seed uint64) time.Duration {
	if seed%2 == 0 {
		return 0
	}
	return w.plan.Caches[cfg].TTL
}

func (w *worker) delete(g, cfg int, key string) *Op {
	op := w.begin(g, KDelete, cfg, key)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	w.end(op, w.caches[cfg].Delete(ctx, key))
	return op
}

// compute returns the compute function of call via, for key: each call of
// it is an op of its own, which draws the value's version first.
func (w *worker) compute(g, cfg int, key string, via *Op, seed uint64) func(context.Context) (Value, error) {
	return func(ctx context.Context) (Value, error) {
		op, ver, err := w.beginCompute(ctx, g, cfg, via, key)
		if err != nil {
			return Value{}, err
		}
		if p, ok := dogpile.Previous[Value](ctx); ok {
			op.Prev = p.V // written with the op's end
		}
		if err := w.computing(ctx, op, seed); err != nil {
			return Value{}, err
		}
		return Value{K: key, V: ver, P: w.proc, G: g}, nil
	}
}

// computeMany is compute for FetchMany: it leaves some keys out.
func (w *worker) computeMany(g, cfg int, via *Op, seed uint64) func(context.Context, []string) (map[string]Value, error) {
	return func(ctx context.Context, missing []string) (map[string]Value, error) {
		op, ver, err := w.beginCompute(ctx, g, cfg, via, missing...)
		if err != nil {
			return nil, err
		}
		if err := w.computing(ctx, op, seed); err != nil && !errors.Is(err, dogpile.ErrNotFound) {
			return nil, err
		}
		r := rand.New(rand.NewPCG(seed, uint64(op.ID)^1))
		m := map[string]Value{}
		for i, k := range missing {
			if r.IntN(100) >= notFoundPercent {
				m[k] = Value{K: k, V: ver + int64(i), P: w.proc, G: g}
			}
		}
		return m, nil
	}
}

// beginCompute starts a compute op of keys for call via: it tags its
// values with their keys' tags, then (as one reads data after Tag) draws
// a version per key, consecutive in the order of keys, and records them.
func (w *worker) beginCompute(ctx context.Context, g, cfg int, via *Op, keys ...string) (*Op, int64, error) {
	op := w.newOp(g, KCompute, cfg, keys...)
	op.Via, op.ViaK = via.ID, via.Kind
	for _, k := range keys {
		if t := tagOf(k); !slices.Contains(op.Tags, t) {
			op.Tags = append(op.Tags, t)
		}
	}
	dogpile.Tag(ctx, op.Tags...)
	op.Tagged = time.Now().UnixNano()
	ver, err := w.draw(len(keys))
	if err != nil {
		w.led.Write(op)
		w.end(op, err)
		return nil, 0, err
	}
	op.Vers = map[string]int64{}
	for i, k := range keys {
		op.Vers[k] = ver + int64(i)
	}
	w.led.Write(op)
	return op, ver, nil
}

// computing is the body of a compute op: it takes a while, unless its
// context ends (the compute lock was lost, or the Cache closed), and
// fails or finds nothing now and then.
func (w *worker) computing(ctx context.Context, op *Op, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, uint64(op.ID)))
	var err error
	if !sleep(ctx, time.Duration(r.Int64N(int64(maxCompute)))) {
		op.Lost = true
		err = context.Cause(ctx)
	} else if x := r.IntN(100); x < failPercent {
		err = errComputeFailed
	} else if x < failPercent+notFoundPercent {
		err = dogpile.ErrNotFound
	}
	w.end(op, err)
	return err
}
