package main

import (
	"context"
	"strings"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
	"github.com/dogpile-go/dogpile/lock"
	mclock "github.com/dogpile-go/dogpile/lock/memcache"
)

// A store is where the tap and the measuring counters live: Redis (a
// lock.Mutex) or memcached (a lock/memcache Mutex). The waiters see only
// these functions, so both run the same checks.
type store struct {
	lock  func(ctx context.Context) (held, error)
	enter func(ctx context.Context) (counted, error)
	leave func(ctx context.Context) (at int64, err error)
	close func() // releases the store's client, if it made one
}

// held is a lease on the tap, whichever store granted it.
type held struct {
	unlock func(context.Context) error
	done   <-chan struct{}
	fence  int64 // 0 on memcached, which has no fencing
	asked  int64 // local clock (µs) by which the server had queued the waiter, 0 if unknown; set on failure too
}

// counted is what entering the tap's counters reports: how many held the
// tap at that moment, this hold's number, and the time in µs.
type counted struct{ holders, seq, at int64 }

// redisStore is the tap as a lock.Mutex on Redis, counted by scripts that
// read Redis's own clock.
func redisStore(c *demo.Conn, t task) store {
	opts := []lock.Option{lock.WithTTL(t.TTL), lock.WithWaitTimeout(t.Timeout)}
	if t.Fair {
		// First come, first served; without it, whoever retries first
		// after a release wins.
		opts = append(opts, lock.WithFair())
	}
	tap := lock.NewMutex(c.Client, t.Tap, opts...)
	c.Client.AddHook(askedHook{})
	k := runKeys(t.RunID)
	return store{
		close: func() {},
		lock: func(ctx context.Context) (held, error) {
			ctx, asked := withAsked(ctx)
			l, err := tap.Lock(ctx)
			if err != nil {
				return held{asked: asked()}, err
			}
			return held{unlock: l.Unlock, done: l.Done(), fence: l.Fence(), asked: asked()}, nil
		},
		enter: func(ctx context.Context) (counted, error) {
			r, err := enterScript.Run(ctx, c.Client, k.list(), keyTTL).Int64Slice()
			if err != nil {
				return counted{}, err
			}
			return counted{holders: r[0], seq: r[1], at: r[2]*1e6 + r[3]}, nil
		},
		leave: func(ctx context.Context) (int64, error) {
			r, err := leaveScript.Run(ctx, c.Client, []string{k.holders}).Int64Slice()
			if err != nil {
				return 0, err
			}
			return r[0]*1e6 + r[1], nil
		},
	}
}

// memcacheStore is the tap as a lock/memcache Mutex, counted with
// memcached's incr and decr. Memcached has no clock to read, so hold times
// come from this machine's clock: the processes of one run share it.
func memcacheStore(t task) store {
	client := gomemcache.New(strings.Split(t.Memcache, ",")...)
	tap := mclock.NewMutex(client, t.Tap, mclock.WithTTL(t.TTL), mclock.WithWaitTimeout(t.Timeout))
	k := runKeys(t.RunID)
	return store{
		close: func() { _ = client.Close() },
		lock: func(ctx context.Context) (held, error) {
			l, err := tap.Lock(ctx)
			if err != nil {
				return held{}, err
			}
			return held{unlock: l.Unlock, done: l.Done()}, nil
		},
		enter: func(context.Context) (counted, error) {
			n, err := client.Increment(k.holders, 1)
			if err != nil {
				return counted{}, err
			}
			seq, err := client.Increment(k.seq, 1)
			return counted{holders: int64(n), seq: int64(seq), at: time.Now().UnixMicro()}, err
		},
		leave: func(context.Context) (int64, error) {
			at := time.Now().UnixMicro()
			_, err := client.Decrement(k.holders, 1)
			return at, err
		},
	}
}

// initMemcache creates a run's counters in memcached (incr needs an
// existing value) and returns a function that deletes them.
func initMemcache(addrs string, k keys) (cleanup func(), err error) {
	client := gomemcache.New(strings.Split(addrs, ",")...)
	if err := client.Ping(); err != nil {
		return nil, err
	}
	for _, key := range []string{k.holders, k.seq} {
		if err := client.Set(&gomemcache.Item{Key: key, Value: []byte("0"), Expiration: keyTTL}); err != nil {
			return nil, err
		}
	}
	return func() {
		for _, key := range []string{k.holders, k.seq} {
			_ = client.Delete(key)
		}
		_ = client.Close()
	}, nil
}
