package main

import (
	"context"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/redis/go-redis/v9"
)

// cached is the library: dogpile.Cache.Fetch computes a missing key once
// across every process sharing the Redis, and wakes the others by push.
type cached struct {
	c   *dogpile.Cache[value]
	ttl time.Duration
}

func newDogpile(client redis.UniversalClient, ttl time.Duration) fetcher {
	return &cached{c: dogpile.New[value](client), ttl: ttl}
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
	}
}
