package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
)

// cached is the library: dogpile.Cache.Fetch computes a missing key once
// across every process sharing the Redis, and wakes the others by push.
type cached struct {
	c   *dogpile.Cache[value]
	ttl time.Duration
}

func newDogpile(client redis.UniversalClient, ttl time.Duration, opts ...dogpile.Option) fetcher {
	return &cached{c: dogpile.New[value](client, opts...), ttl: ttl}
}

// newFresh is dogpile with both freshness options: a hot key is refreshed
// in the background shortly before it expires (WithEarlyRefresh), and if
// that refresh is late, callers get the last value for up to one more TTL
// while it finishes (WithStale). After a key's first fill, no caller waits
// for its compute.
func newFresh(client redis.UniversalClient, ttl time.Duration) fetcher {
	return newDogpile(client, ttl, dogpile.WithStale(ttl), dogpile.WithEarlyRefresh(1))
}

func (d *cached) fetch(ctx context.Context, key string, compute func(context.Context) (value, error)) (value, error) {
	return d.c.Fetch(ctx, key, d.ttl, compute)
}

func (d *cached) stats() map[string]uint64 {
	s := d.c.Stats()
	return map[string]uint64{
		"Hits":          s.Hits,
		"Misses":        s.Misses,
		"Computes":      s.Computes,
		"Waits":         s.Waits,
		"PushWakeups":   s.PushWakeups,
		"PollWakeups":   s.PollWakeups,
		"Takeovers":     s.Takeovers,
		"DecodeErrors":  s.DecodeErrors,
		"ComputeErrors": s.ComputeErrors,
		"Stale":         s.Stale,
		"Refreshes":     s.Refreshes,
	}
}
