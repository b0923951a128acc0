package dogpile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/wake"
)

// A Codec turns values into bytes and back. Unmarshal receives a pointer to
// a value of the Cache's type T. A Codec must be safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(b []byte, v any) error
}

// MsgPack is the default [Codec]: MessagePack, by
// github.com/vmihailenco/msgpack/v5.
var MsgPack Codec = msgpackCodec{}

type msgpackCodec struct{}

func (msgpackCodec) Marshal(v any) ([]byte, error)   { return msgpack.Marshal(v) }
func (msgpackCodec) Unmarshal(b []byte, v any) error { return msgpack.Unmarshal(b, v) }

// encode encodes v as a plain (version 1) entry.
func (c *core[T]) encode(v T) ([]byte, error) { return c.encodeEntry(v, entry.Meta{}) }

// encodeEntry encodes v with m; a tombstone carries no value. With
// WithCompression, a payload longer than its threshold is compressed, if
// that makes it shorter. WithMaxValueSize bounds the entry as it would be
// uncompressed: the size a reader checks before decompressing it, so that
// whatever is stored can be read back (see decompress).
func (c *core[T]) encodeEntry(v T, m entry.Meta) (b []byte, err error) {
	var p []byte
	if !m.NotFound {
		if p, err = c.marshal(v); err != nil {
			return nil, err
		}
	}
	raw := len(p)
	p, m.Compressed = c.compress(p)
	b = entry.Append(make([]byte, 0, entry.MaxHeader+len(p)), m, c.fresh != nil)
	if n := len(b) + raw; n > c.opts.maxValue {
		return nil, tooLarge{n, c.opts.maxValue}
	}
	return append(b, p...), nil
}

// decode decodes the value of an entry; a tombstone is an error.
func (c *core[T]) decode(b []byte) (T, error) {
	v, m, err := c.decodeEntry(b)
	if err == nil && m.NotFound {
		err = errors.New("a not-found tombstone")
	}
	return v, err
}

// decodeEntry never panics: a codec that panics on foreign bytes reports an
// error instead.
func (c *core[T]) decodeEntry(b []byte) (v T, m entry.Meta, err error) {
	p, m, err := c.payload(b)
	if err != nil || m.NotFound {
		return v, m, err
	}
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("codec panicked: %v", r)
		}
	}()
	err = c.opts.codec.Unmarshal(p, &v)
	return v, m, err
}

// payload returns entry b's meta and its encoded value, uncompressed (none
// for a tombstone).
func (c *core[T]) payload(b []byte) (p []byte, m entry.Meta, err error) {
	p, m, err = entry.Parse(b)
	if err != nil || m.NotFound || !m.Compressed {
		return p, m, err
	}
	p, err = c.decompress(p, len(b)-len(p))
	return p, m, err
}

// marshal encodes v with the Cache's codec; a codec's panic is an error.
func (c *core[T]) marshal(v T) (p []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec panicked: %v", r)
		}
	}()
	return c.opts.codec.Marshal(v)
}

// decodeError counts and logs stored bytes of key that did not decode.
func (c *core[T]) decodeError(ctx context.Context, key string, err error) {
	c.stats.decodeErrors.Add(1)
	c.log(ctx, slog.LevelWarn, "dogpile: stored value does not decode; recomputing it", key, slog.Any("error", err))
}

// Compression (WithCompression) and the size bound (WithMaxValueSize),
// which is one bound for both ends: the entry as it is uncompressed. A
// store checks it (see encodeEntry) and a read checks it again from S2's
// length prefix before decompressing, so whatever is stored is readable,
// and no read allocates more than the bound for a value.

// compress returns p S2-compressed, and true, if it is longer than the
// WithCompression threshold and that makes it shorter; else p and false.
// A payload that encodeEntry refuses anyway is not compressed: no CPU is
// spent on it.
func (c *core[T]) compress(p []byte) ([]byte, bool) {
	if c.opts.compressMin == 0 || len(p) <= c.opts.compressMin || entry.HeaderLen+len(p) > c.opts.maxValue {
		return p, false
	}
	if z := s2.Encode(nil, p); len(z) < len(p) {
		return z, true
	}
	return p, false
}

// decompress returns the S2 payload p, after a header of head bytes,
// decompressed. It refuses, before allocating anything, one whose entry
// would then exceed WithMaxValueSize, the bound encodeEntry checked: only
// bytes that no Cache with this limit stored (another limit's, or bytes
// crafted to exhaust memory: S2's length prefix is a claim) are refused.
func (c *core[T]) decompress(p []byte, head int) ([]byte, error) {
	n, err := s2.DecodedLen(p)
	switch {
	case err != nil:
		return nil, fmt.Errorf("compressed payload: %w", err)
	case head+n > c.opts.maxValue:
		return nil, tooLarge{head + n, c.opts.maxValue}
	}
	return s2.Decode(nil, p)
}

// maxWakeValue is the longest encoded value that the store script sends
// along with its wake-up. Longer values are read again by each waiting
// process (one more round trip), rather than pushed through every
// subscriber's connection and kept in each Sub.
const maxWakeValue = 64 << 10

// storedBy returns the value carried by a wake-up payload (see script.Store)
// if the compute that stored it is the one of holder, the token that the
// last fetch script saw holding the lock, and the value decodes.
//
// Why the token must match: a payload is the value exactly as the holder
// stored it, in the same atomic step that checked the holder still held
// the lock (a fenced store, so never a value computed under a lock that a
// Set, a Delete or a takeover had taken away). Holder's store ran after our
// fetch script saw holder holding the lock and no value, which was after
// this flight began: the value is then at least as fresh as a GET made
// when the wake-up was sent, i.e. what re-reading would have returned at
// that moment. A payload of any other compute has no such order with
// respect to our observation: a message published before our subscription
// was in place (the hub shares one connection, and a Sub joining a
// channel that another Cache of this process already listens to may be
// handed a message that was in flight), or by the holder of an earlier
// lock, may carry a value that a Delete since removed or a Set since
// replaced. Those, a plain "v", a payload that does not decode, and every
// other wake-up fall back to reading Redis again (the fetch script), as
// does a payload replaced by a later message (Set, Delete) before we read
// it: Payload keeps the latest.
func (c *core[T]) storedBy(holder, payload string) ([]byte, bool) {
	token, value, ok := wake.StoredValue(payload)
	if !ok || holder == "" || token != holder {
		return nil, false
	}
	b := []byte(value)
	if _, _, err := c.decodeEntry(b); err != nil {
		return nil, false
	}
	return b, true
}

// notFoundMark starts the error text of a compute that found no value, so
// that waiting processes return ErrNotFound rather than ErrComputeFailed.
const notFoundMark = "\x00not found: "

// entry turns compute's answer for j (v, or cerr) into the entry to store
// and its TTL: a value with the metadata the freshness options need, or a
// tombstone for ErrNotFound with WithNegativeTTL. took is how long the
// value took to get, round trips included. It returns an error if there is
// nothing to store: compute failed, or the value does not encode.
func (c *core[T]) entry(j *job[T], v T, cerr error, took time.Duration, ro *resultOpts) (b []byte, ttl time.Duration, err error) {
	fresh, ttl := c.storeTTL(j.ttl, ro)
	m := entry.Meta{}
	if errors.Is(cerr, ErrNotFound) && c.opts.negativeTTL > 0 {
		cerr, ttl, m = nil, c.jittered(c.opts.negativeTTL), entry.Meta{NotFound: true, Took: took}
	} else if c.opts.beta > 0 && fresh > 0 {
		m = entry.Meta{Took: took, Early: c.earlyGap(took, fresh)}
	}
	if cerr != nil {
		return nil, 0, cerr
	}
	if b, err = c.encodeEntry(v, m); err != nil {
		return nil, 0, fmt.Errorf("dogpile: encode %q: %w", j.key, err)
	}
	return b, ttl, nil
}

// storeTTL is how long a computed value is fresh, the TTL compute set (see
// SetTTL) or the caller's, spread by WithTTLJitter, and how long it stays
// in Redis: that plus the stale window. 0 stores nothing.
func (c *core[T]) storeTTL(ttl time.Duration, ro *resultOpts) (fresh, stored time.Duration) {
	if d, ok := ro.get(); ok {
		if d <= 0 {
			return 0, 0
		}
		ttl = d
	}
	fresh = c.jittered(ttl)
	return fresh, fresh + c.opts.stale
}

// jittered is ttl spread by up to ±WithTTLJitter's fraction of it, never
// below a millisecond (Redis's resolution).
func (c *core[T]) jittered(ttl time.Duration) time.Duration {
	if c.opts.jitter == 0 {
		return ttl
	}
	spread := c.opts.jitter * (2*rand.Float64() - 1)
	return max(time.Millisecond, ttl+time.Duration(float64(ttl)*spread))
}

// earlyGap draws, once per stored value, how long before its TTL runs out
// the value is refreshed (see WithEarlyRefresh). The floor is twice took: a
// refresh started only took before expiry has no room for a late start (the
// hit that notices, the goroutine, the lock's round trip) or a compute
// slower than the last, and callers then wait at expiry: with a floor of δ·β
// they did, with 2·δ·β they did not, for a few more computes
// (bench/HISTORY.md, "Figures moved out of code comments"). The cap of a
// third of the TTL keeps a key to at most 1.5 computes per TTL period (about
// 1.25 when δ is a tenth of the TTL).
//
// Unlike the paper, which draws on each read, the gap is drawn once, by the
// process that stores the value, and kept in the entry. Drawn on each read,
// the chance that some read refreshes early grows with the call rate: at
// thousands of calls a second the refresh would start near δ·β·ln(rate·δ)
// before expiry, several times a TTL period. With one draw per value every
// process agrees on one refresh point, which neither drifts earlier with
// load nor comes later than 2·δ·β before expiry; the draw also spreads the
// refreshes of many keys stored at the same moment.
func (c *core[T]) earlyGap(took, ttl time.Duration) time.Duration {
	draw := earlyFloor - math.Log(1-rand.Float64()) // 2 − ln u, u in (0, 1]
	gap := time.Duration(float64(took) * c.opts.beta * draw)
	return min(gap, ttl/3)
}

// earlyFloor is the least early-refresh gap, in units of δ·β (see earlyGap).
const earlyFloor = 2

// previous is what Previous returns for a compute that replaces the entry
// b, decoded when compute asks (nil if b is): the value, unless b is a
// tombstone or does not decode.
func (c *core[T]) previous(b []byte) func() (any, bool) {
	if b == nil {
		return nil
	}
	return func() (any, bool) {
		v, m, err := c.decodeEntry(b)
		return v, err == nil && !m.NotFound
	}
}
