package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
)

// cached is the library: dogpile.Cache.Fetch computes a missing key once
// across every process sharing the Redis, and wakes the others by push.
type cached struct {
	c      *dogpile.Cache[value]
	prefix string
	ttl    time.Duration
}

// newDogpile returns the library's fetcher for the keys under prefix. The
// Cache's prefix is the task's, and fetch takes it off the keys, so that
// the debug page and the hot keys show a key as "k0", not as its whole
// Redis name.
func newDogpile(client redis.UniversalClient, prefix string, ttl time.Duration, opts ...dogpile.Option) fetcher {
	return &cached{c: dogpile.New[value](client, append(opts, dogpile.WithPrefix(prefix))...), prefix: prefix, ttl: ttl}
}

// newFresh is dogpile with both freshness options: a hot key is refreshed
// in the background shortly before it expires (WithEarlyRefresh), and if
// that refresh is late, callers get the last value for up to one more TTL
// while it finishes (WithStale). After a key's first fill, no caller waits
// for its compute.
func newFresh(client redis.UniversalClient, prefix string, ttl time.Duration) fetcher {
	return newDogpile(client, prefix, ttl, dogpile.WithStale(ttl), dogpile.WithEarlyRefresh(1))
}

func (d *cached) fetch(ctx context.Context, key string, compute func(context.Context) (value, error)) (value, error) {
	return d.c.Fetch(ctx, strings.TrimPrefix(key, d.prefix), d.ttl, compute)
}

func (d *cached) cache() dogpile.AnyCache { return d.c }

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

// serveDebug serves dogpile's debug page of c at addr (at / and at
// /debug/dogpile, where a program would mount it) until stop is called.
func serveDebug(addr string, c dogpile.AnyCache) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-debug: %w", err)
	}
	page := dogpile.DebugHandler(c)
	mux := http.NewServeMux()
	mux.Handle("/{$}", page)
	mux.Handle("/debug/dogpile", page)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) // until Close
	}()
	return func() { srv.Close(); <-done }, nil
}
