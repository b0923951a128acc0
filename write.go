package dogpile

import (
	"context"
	"fmt"
	"time"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// set is Set, and SetTagged with tags.
func (c *core[T]) set(ctx context.Context, key string, v T, ttl time.Duration, tags []string) error {
	if err := c.checkTTL(key, ttl); err != nil {
		return err
	}
	ks := c.keys(key)
	b, err := c.encode(v)
	if err != nil {
		return fmt.Errorf("dogpile: encode %q: %w", key, err)
	}
	stored := c.jittered(ttl) + c.opts.stale
	calls := append(make([]scriptCall, 0, 1+len(tags)), scriptCall{setScript, []string{ks.value, ks.lock, ks.channel},
		[]any{b, redisutil.Millis(stored), c.publish}})
	calls = append(calls, c.tagCalls(ks.value, stored, tags)...)
	err = c.guard(ctx, func() error {
		if len(calls) == 1 || !c.oneNode() {
			// Where a tag's set and the value live on different nodes,
			// the value first: added to a set before it is stored, it
			// could be voided by an InvalidateTag in between and then
			// stored, out of every set, for good.
			err := c.run(ctx, setScript, calls[0].keys, calls[0].args...).Err()
			if err == nil && len(calls) > 1 {
				err = firstErr(c.runPipelined(ctx, calls[1:]))
			}
			if err != nil && len(calls) > 1 {
				// Stored (or its reply lost) but maybe in no tag's set,
				// where InvalidateTag would never find it: undone, unless
				// a later write replaced it.
				redisutil.Rollback(ctx, func(ctx context.Context) {
					_ = c.run(ctx, undoSetScript, []string{ks.value}, b).Err()
				})
			}
			return err
		}
		return firstErr(c.runPipelined(ctx, calls))
	})
	c.forget(ks.value)
	if err != nil {
		return redisutil.Failed(ctx, "dogpile", "set", key, err)
	}
	return nil
}

// forget makes this process read vk afresh after it wrote vk (Set, Delete,
// Refresh): once the write has returned, no later call joins a flight
// whose read or compute may predate it, and the near tier drops its copy
// before Redis's invalidation arrives. Called after the write's reply (or
// failure: it may have been applied), so that a flight started after
// forget reads after the write.
func (c *core[T]) forget(vk string) {
	c.flights.forget(vk)
	c.nearForget(vk)
}
