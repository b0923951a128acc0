package redistest

import (
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A Ring is a set of independent private redis-servers that a go-redis
// [redis.Ring] shards keys over by consistent hashing (of a key's hash tag,
// when it has one). Each shard is a [Server], so a test can kill, pause or
// restart it.
//
// A Ring is safe for concurrent use; do not modify Shards. The zero value is
// not usable; create one with [StartRing].
type Ring struct {
	Shards []*Server
}

// StartRing starts shards private redis-servers for a ring. tb.Cleanup
// kills them. It skips or fails like [StartServer] when REDIS_ADDR is set or
// redis-server is missing.
func StartRing(tb testing.TB, shards int) *Ring {
	tb.Helper()
	if shards < 1 {
		tb.Fatalf("redistest: StartRing(%d): need at least 1 shard", shards)
	}
	r := &Ring{Shards: make([]*Server, shards)}
	for i := range r.Shards {
		r.Shards[i] = newServer(tb, false, nil)
	}
	if err := startAll(r.Shards); err != nil {
		tb.Fatal(err)
	}
	return r
}

// Client returns a new ring client over every shard; tb.Cleanup closes it.
func (r *Ring) Client(tb testing.TB) *redis.Ring {
	tb.Helper()
	addrs := make(map[string]string, len(r.Shards))
	for i, s := range r.Shards {
		addrs["shard"+strconv.Itoa(i)] = s.Addr()
	}
	c := redis.NewRing(&redis.RingOptions{Addrs: addrs})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// startAll starts servers concurrently: each takes tens of milliseconds,
// mostly waiting.
func startAll(servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() { errs[i] = s.start() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
