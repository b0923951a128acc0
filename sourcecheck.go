package dogpile

// Checking hits against the source of truth (WithSourceCheck): Meta's
// Polaris method, run by the Cache on a sample of its own hits.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/entry"
)

// sourceDelay is how long after a hit WithSourceCheck calls verify, and how
// long after a mismatch it reads Redis again.
const sourceDelay = time.Second

// WithSourceCheck checks the cache against the source of truth: about
// fraction of the hits (from Redis or the near tier; never a stale one,
// which is knowingly old) are checked in the background, never on the
// caller's path, and counted in [Stats].SourceSampled. A second after the
// hit, verify is called with the key, as the source of the value, and its
// value is encoded with the Cache's [Codec] and compared with the value
// served, encoded; an error matching [ErrNotFound] matches a not-found
// tombstone ([WithNegativeTTL]). On a mismatch the value's age is told
// apart from a missed write: a second later Redis is read again. If it no
// longer holds the very entry served, the source changed and the cache
// was told (Delete, Set, Expire, InvalidateTag, or the TTL), and nothing
// is counted; if it still does, the source changed at least a second
// before and nothing replaced the value (a database write without its
// Delete, say): the hit is counted in [Stats].SourceInconsistent and
// reported to the observer as an [EventInconsistent] with its key (Near
// false).
//
// Values are compared by bytes, compression aside: a codec must encode
// equal values to equal bytes (MsgPack does, but not a Go map of more than
// one key, whose order varies). A near hit's value is encoded again for the
// comparison. verify runs on a goroutine of the Cache, one call at a time,
// its context bounded by 5 s and ended by Close, which waits for it; a
// check whose verify fails (another error, or a panic) or whose read of
// Redis fails is dropped, counted nowhere. At most 200 checks begin a
// second (20 at once); a hit picked beyond that is not checked. Picking
// costs a hit a multiplication. New panics if T is not the Cache's value
// type; WithSourceCheck panics unless 0 < fraction <= 1, or if verify is
// nil.
func WithSourceCheck[T any](fraction float64, verify func(ctx context.Context, key string) (T, error)) Option {
	switch {
	case !(fraction > 0 && fraction <= 1):
		panic(fmt.Sprintf("dogpile: WithSourceCheck(%v): the fraction is not in (0, 1] (a programmer error)", fraction))
	case verify == nil:
		panic("dogpile: WithSourceCheck: nil verify (a programmer error)")
	}
	return optionFunc(func(o *options) { o.sourceCheck, o.verify = fraction, verify })
}

// withSourceDelay sets WithSourceCheck's delay. It is for tests, which
// shorten it.
func withSourceDelay(d time.Duration) Option {
	return optionFunc(func(o *options) { o.sourceDelay = d })
}

// mustVerify returns WithSourceCheck's verify for a Cache of T values, or
// panics: the option is not generic over the Cache, so its T may differ.
func mustVerify[T any](f any) func(context.Context, string) (T, error) {
	verify, ok := f.(func(context.Context, string) (T, error))
	if !ok {
		panic(fmt.Sprintf("dogpile: WithSourceCheck's verify is a %T, given to a Cache of %v values (a programmer error)", f, reflect.TypeFor[T]()))
	}
	return verify
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

// newSourceChecker returns WithSourceCheck's checker: verify, the delay
// after the hit; Redis again, the delay after a mismatch.
func (c *core[T]) newSourceChecker() *checker[sourceSample[T]] {
	d := c.opts.sourceDelay
	if d <= 0 {
		d = sourceDelay
	}
	k := newChecker[sourceSample[T]](&c.life, c.opts.sourceCheck)
	k.delays = [2]time.Duration{d, d}
	k.reads = [2]func(*sourceSample[T]) string{nil, func(s *sourceSample[T]) string {
		if s.vk == "" {
			return c.valueKey(s.key)
		}
		return s.vk
	}}
	k.steps = [2]func(context.Context, *sourceSample[T], got) verdict{c.againstSource, c.stillServed}
	k.read = c.checkReads
	k.bad = func(ctx context.Context, s *sourceSample[T]) {
		c.emit(ctx, Event{Kind: EventInconsistent, Key: s.key})
	}
	return k
}

// againstSource is a source check's first step: verify's answer, encoded,
// against what the hit served.
func (c *core[T]) againstSource(ctx context.Context, s *sourceSample[T], _ got) verdict {
	served, tomb, err := c.served(s)
	if err != nil {
		return checkDrop // bytes that do not decode were never served
	}
	v, err := c.callVerify(ctx, s.key)
	switch {
	case ctx.Err() != nil:
		return checkDrop
	case errors.Is(err, ErrNotFound):
		return agree(tomb)
	case err != nil:
		return checkDrop
	case tomb:
		return checkNext
	}
	p, err := c.marshal(v)
	if err != nil {
		return checkDrop
	}
	return agree(bytes.Equal(p, served))
}

// agree is the verdict of the first step: consistent, or a mismatch for
// the next step to explain.
func agree(same bool) verdict {
	if same {
		return checkOK
	}
	return checkNext
}

// stillServed is a source check's second step, after a mismatch, given
// what Redis holds (g): the hit was inconsistent only if Redis still holds
// the entry it served. A write to the source that the cache was told of,
// by the time verify saw it, would have replaced or removed it by now.
func (c *core[T]) stillServed(_ context.Context, s *sourceSample[T], g got) verdict {
	switch {
	case g.err == redis.Nil:
		return checkOK
	case g.err != nil:
		return checkDrop
	case s.near && c.near.sum(g.b) == s.sum, !s.near && bytes.Equal(g.b, s.b):
		return checkBad
	}
	return checkOK
}

// served returns the encoded value a sampled hit served, uncompressed, or
// that it served a not-found tombstone.
func (c *core[T]) served(s *sourceSample[T]) (p []byte, notFound bool, err error) {
	if s.near {
		if s.notFound {
			return nil, true, nil
		}
		p, err = c.marshal(s.v)
		return p, false, err
	}
	p, m, err := entry.Parse(s.b)
	switch {
	case err != nil || m.NotFound:
		return nil, m.NotFound, err
	case m.Compressed:
		p, err = c.decompress(p, len(s.b)-len(p))
	}
	return p, false, err
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

// callVerify calls verify for key, bounded by verifyBound. Its panic is
// logged (WithLogger) and returned as an error: it runs on the Cache's
// goroutine, which must not crash the process.
func (c *core[T]) callVerify(ctx context.Context, key string) (v T, err error) {
	ctx, cancel := context.WithTimeout(ctx, verifyBound)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dogpile: verify panicked: %v", r)
			c.log(ctx, slog.LevelError, "dogpile: WithSourceCheck's verify panicked", key, slog.Any("panic", r))
		}
	}()
	return c.checks.verify(ctx, key)
}

// staleRead reports whether an entry b read from Redis, without its PTTL,
// may be past its TTL (see WithStale): Get does not tell, so a Get hit is
// checked only when its entry's expiry says it is fresh.
func (c *core[T]) staleRead(b []byte) bool {
	if c.opts.stale == 0 {
		return false
	}
	d, ok := c.fresh.remaining(b)
	return !ok || d <= c.opts.stale
}
