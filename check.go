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
	"github.com/dogpile-go/dogpile/internal/near"
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
// 5 s, and Close waits for the call in progress; a check whose verify or
// read fails is dropped. At most 200 checks
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

// newNearChecker returns WithConsistencySampling's checker: it reads the
// value from Redis, and if Redis holds other bytes, looks at the tier
// again the bound later (the tier's MaxLag, 100 ms by default).
func (c *core[T]) newNearChecker() *check.Checker[nearSample] {
	bad := func(ctx context.Context, s *nearSample) {
		c.emit(ctx, Event{Kind: EventInconsistent, Key: s.key, Near: true})
	}
	return check.New(&c.life, c.opts.nearCheck, c.checkReads, bad,
		check.Step[nearSample]{Key: func(s *nearSample) string { return s.vk }, Run: c.nearAgainstRedis},
		check.Step[nearSample]{After: c.near.Tracker().Config().MaxLag, Run: c.nearStillServed})
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
	p, m, err := c.payload(s.b)
	if err != nil || m.NotFound {
		return nil, m.NotFound, err
	}
	return p, false, nil
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
	d, ok := c.fresh.Remaining(b)
	return !ok || d <= c.opts.stale
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

// sampleNear offers a near hit of key to the checkers that pick it, if
// they may begin a check. n is the hit count that emit's increment
// returned: picking a near hit costs no other access to shared memory (a
// read of the counter after the increment, one more contended cache line
// on every hit, was a measurable share of a hot key's near hits on
// two cores: bench/HISTORY.md, issue 42). emit calls it only if check.Mix(n) is
// below checks.limit.
//
// The entry is looked up again here, for the few hits that are checked,
// rather than handed over by every hit: it is the one served, unless an
// invalidation came within these nanoseconds; then the check is of the
// entry the tier serves now, or of none.
func (c *core[T]) sampleNear(key string, n uint64) {
	now := near.Now()
	kn, ks := c.checks.near, c.checks.source
	toNear, toSource := kn.Pick(n) && kn.Take(now), ks.Pick(n) && ks.Take(now)
	if !toNear && !toSource {
		return
	}
	vk := c.valueKey(key)
	e, ok := c.near.Peek(vk)
	if !ok {
		return
	}
	if toNear {
		kn.Offer(now, nearSample{key: key, vk: vk, sum: e.Sum, until: e.Until})
	}
	if toSource {
		ks.Offer(now, sourceSample[T]{key: key, vk: vk, v: e.V, notFound: e.NotFound, sum: e.Sum, near: true})
	}
}
