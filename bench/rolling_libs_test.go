package benchmarks

import (
	"context"
	"time"

	"github.com/go-redis/cache/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
)

// stamped is the value of the rolling-expiry scenario: it carries when its
// compute returned, so that a caller can tell a hit from a stale answer or
// a value computed during its call, whatever the library.
type stamped struct {
	Key        string `msgpack:"key"`
	ComputedAt int64  `msgpack:"at"` // unix µs
	Payload    []byte `msgpack:"payload"`
}

// A stampFetcher is one process's read-through cache of stamped values with
// the scenario's TTL.
type stampFetcher func(ctx context.Context, key string, compute func(context.Context) (stamped, error)) (stamped, error)

// A rollingLib adapts one library, or one configuration of dogpile, to
// stampFetcher.
type rollingLib struct {
	name, how string
	// newFetcher returns one process's fetcher, and a count of the stale
	// answers it gave so far, or nil for a library that never answers with
	// a value past its TTL in Redis.
	newFetcher func(rdb *redis.Client) (stampFetcher, func() uint64)
}

// rollingStale is dogpile's stale window in the scenario: long enough that
// a value is always still there when its refresh is due.
const rollingStale = 5 * time.Second

var rollingLibs = []rollingLib{
	{"dogpile", "Fetch, dogpile.New defaults", dogpileStamped()},
	{"dogpile+stale", "Fetch with WithStale(5s)", dogpileStamped(dogpile.WithStale(rollingStale))},
	{"dogpile+early", "Fetch with WithEarlyRefresh(1)", dogpileStamped(dogpile.WithEarlyRefresh(1))},
	{"dogpile+stale+early", "Fetch with WithStale(5s) and WithEarlyRefresh(1)",
		dogpileStamped(dogpile.WithStale(rollingStale), dogpile.WithEarlyRefresh(1))},
	{"go-redis/cache", "cache.Once (in-process singleflight, no cross-process lock), no local cache", goRedisCacheStamped},
	{"dtm-labs/rockscache", "v0.1.1 Fetch2, default options (weak consistency, lock 3 s, waiters poll every 100 ms) but " +
		"RandomExpireAdjustment 0 and expire = TTL + Delay, since it stores expire − Delay − random in whole seconds " +
		"(1 s here); it serves a stale value only after TagAsDeleted, not past a TTL", rocksStamped},
}

func dogpileStamped(opts ...dogpile.Option) func(rdb *redis.Client) (stampFetcher, func() uint64) {
	return func(rdb *redis.Client) (stampFetcher, func() uint64) {
		c := dogpile.New[stamped](rdb, opts...)
		return func(ctx context.Context, key string, compute func(context.Context) (stamped, error)) (stamped, error) {
			return c.Fetch(ctx, key, rollingTTL, compute)
		}, func() uint64 { return c.Stats().Stale }
	}
}

// go-redis/cache and rockscache read a key past its TTL as a miss: they
// never answer stale.

func goRedisCacheStamped(rdb *redis.Client) (stampFetcher, func() uint64) {
	c := cache.New(&cache.Options{Redis: rdb})
	return func(ctx context.Context, key string, compute func(context.Context) (stamped, error)) (stamped, error) {
		var v stamped
		err := c.Once(&cache.Item{
			Ctx: ctx, Key: key, Value: &v, TTL: rollingTTL,
			Do: func(it *cache.Item) (any, error) { return compute(it.Context()) },
		})
		return v, err
	}, nil
}

func rocksStamped(rdb *redis.Client) (stampFetcher, func() uint64) {
	return rocksFetch[stamped](rdb, rollingTTL), nil
}
