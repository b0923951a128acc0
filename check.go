package dogpile

// Checking sampled hits in the background, run by internal/check: against
// Redis, the near tier's (WithConsistencySampling, near.go), and against
// the source of truth (WithSourceCheck, here: Meta's Polaris method).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/check"
	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// sourceDelay is how long after a hit WithSourceCheck calls verify, and how
// long after a mismatch it reads Redis again; verifyBound bounds a call of
// verify.
const (
	sourceDelay = time.Second
	verifyBound = 5 * time.Second
)

// WithSourceCheck checks the cache against the source of truth: about
// fraction of the hits that are not stale are checked in the background, a
// second later, by calling verify with the key; its value, encoded with the
// Cache's [Codec], is compared with the value served (ErrNotFound matches a
// tombstone). Checks count in [Stats].SourceSampled. A mismatch counts in
// [Stats].SourceInconsistent, and reaches the observer as an
// [EventInconsistent] with its key, only if Redis still holds the served
// entry a second after it: a source written and then its Delete or Set (or
// the TTL) does not count, a write without them does. A codec must encode
// equal values to equal bytes. verify runs one call at a time, bounded by
// 5 s; a check whose verify or read fails is dropped. At most 200 checks
// begin a second. docs/design.md, "Measuring consistency", tells more. It
// panics unless 0 < fraction <= 1 and verify is set, and New panics if T
// is not the Cache's value type.
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
func (c *core[T]) newSourceChecker() *check.Checker[sourceSample[T]] {
	d := c.opts.sourceDelay
	if d <= 0 {
		d = sourceDelay
	}
	bad := func(ctx context.Context, s *sourceSample[T]) {
		c.emit(ctx, Event{Kind: EventInconsistent, Key: s.key})
	}
	again := func(s *sourceSample[T]) string {
		if s.vk == "" {
			return c.valueKey(s.key)
		}
		return s.vk
	}
	return check.New(&c.life, c.opts.sourceCheck, c.checkReads, bad,
		check.Step[sourceSample[T]]{After: d, Run: c.againstSource},
		check.Step[sourceSample[T]]{After: d, Key: again, Run: c.stillServed})
}

// againstSource is a source check's first step: verify's answer, encoded,
// against what the hit served.
func (c *core[T]) againstSource(ctx context.Context, s *sourceSample[T], _ check.Got) check.Verdict {
	if ctx.Err() != nil {
		return check.Drop // Close: verify is not called
	}
	served, tomb, err := c.served(s)
	if err != nil {
		return check.Drop // bytes that do not decode were never served
	}
	v, err := c.callVerify(ctx, s.key)
	switch {
	case ctx.Err() != nil:
		return check.Drop
	case errors.Is(err, ErrNotFound):
		return agree(tomb)
	case err != nil:
		return check.Drop
	case tomb:
		return check.Next
	}
	p, err := c.marshal(v)
	if err != nil {
		return check.Drop
	}
	return agree(bytes.Equal(p, served))
}

// agree is the check.Verdict of the first step: consistent, or a mismatch for
// the next step to explain.
func agree(same bool) check.Verdict {
	if same {
		return check.OK
	}
	return check.Next
}

// stillServed is a source check's second step, after a mismatch, given
// what Redis holds (g): the hit was inconsistent only if Redis still holds
// the entry it served. A write to the source that the cache was told of,
// by the time verify saw it, would have replaced or removed it by now.
func (c *core[T]) stillServed(_ context.Context, s *sourceSample[T], g check.Got) check.Verdict {
	switch {
	case g.Err == redis.Nil:
		return check.OK
	case g.Err != nil:
		return check.Drop
	case s.near && c.near.Sum(g.B) == s.sum, !s.near && bytes.Equal(g.B, s.b):
		return check.Bad
	}
	return check.OK
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

// checkTimeout bounds a round of checks' reads of Redis.
const checkTimeout = time.Second

// checkReads GETs the value keys vks of a round of checks, in one
// pipeline (one round trip per node), bounded by checkTimeout. While the
// client's circuit is open it sends nothing: a check would be a probe of
// the outage on no caller's behalf (see ErrUnavailable), and the answer
// unknown.
func (c *core[T]) checkReads(ctx context.Context, vks []string) []check.Got {
	gs := make([]check.Got, len(vks))
	fail := func(err error) []check.Got {
		for i := range gs {
			gs[i].Err = err
		}
		return gs
	}
	if c.breaker.Open() {
		return fail(ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	done, err := c.breaker.Allow(ctx)
	if err != nil {
		return fail(err)
	}
	cmds := make([]*redis.StringCmd, len(vks))
	err = redisutil.Pipelined(ctx, c.client, func(p redis.Pipeliner) {
		for i, vk := range vks {
			cmds[i] = p.Get(ctx, vk)
		}
	})
	done(err)
	for i, cmd := range cmds {
		gs[i].B, gs[i].Err = notString(cmd.Bytes())
	}
	return gs
}

// checks are a Cache's checkers; nil without WithConsistencySampling (and
// a near tier) or WithSourceCheck.
type checks[T any] struct {
	limit  uint64                          // the larger checker's limit: a hit whose mix is above goes no further
	near   *check.Checker[nearSample]      // WithConsistencySampling; nil: off
	source *check.Checker[sourceSample[T]] // WithSourceCheck; nil: off
	verify func(ctx context.Context, key string) (T, error)
}

// newChecks returns the checks of c's options, or nil if there are none.
func (c *core[T]) newChecks() *checks[T] {
	k := &checks[T]{}
	if c.opts.nearCheck > 0 && c.near != nil {
		k.near = c.newNearChecker()
	}
	if c.opts.sourceCheck > 0 {
		k.verify = mustVerify[T](c.opts.verify)
		k.source = c.newSourceChecker()
	}
	if k.near == nil && k.source == nil {
		return nil
	}
	k.limit = max(k.near.Limit(), k.source.Limit())
	return k
}

// stats copies the checks' counters into st.
func (k *checks[T]) stats(st *Stats) {
	if k != nil {
		st.NearSampled, st.NearInconsistent = k.near.Counts()
		st.SourceSampled, st.SourceInconsistent = k.source.Counts()
	}
}

// sampleRead offers a hit that served b, read from Redis, which emitRead
// counted n and found not stale, to the source check, if it picks it. b is
// not copied: nothing writes the bytes of a read after it.
func (c *core[T]) sampleRead(key string, b []byte, n uint64) {
	if k := c.checks.source; k.Pick(n) {
		if now := near.Now(); k.Take(now) {
			k.Offer(now, sourceSample[T]{key: key, b: b})
		}
	}
}
