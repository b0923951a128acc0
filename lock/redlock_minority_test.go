package lock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// startServers starts n independent servers and returns them with a client
// for each, made from o with the server's address.
func startServers(t *testing.T, n int, o redis.Options) ([]*redistest.Server, []redis.UniversalClient) {
	t.Helper()
	redistest.RequireServer(t) // here: a Skip on the goroutines below would not end the test
	srvs := make([]*redistest.Server, n)
	var wg sync.WaitGroup
	for i := range srvs {
		wg.Go(func() { srvs[i] = redistest.StartServer(t) })
	}
	wg.Wait()
	cs := make([]redis.UniversalClient, n)
	for i, s := range srvs {
		o := o
		o.Addr = s.Addr()
		c := redis.NewClient(&o)
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return srvs, cs
}

// TestRedlockDrawsNoFence: a Redlock has no fencing numbers, so it keeps
// no counter: while held, each server has the lock's key and nothing
// else, and after Unlock nothing at all.
func TestRedlockDrawsNoFence(t *testing.T) {
	_, clients := startServers(t, 3, redis.Options{})
	rl := lock.NewRedlock(clients, "job", lock.WithTTL(time.Minute))
	l, err := rl.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		if keys := c.Keys(t.Context(), "*").Val(); len(keys) != 1 || keys[0] != "dogpile:redlock:{job}" {
			t.Errorf("server %d holds %q while locked; want only the lock's key", i, keys)
		}
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, c := range clients {
		if keys := c.Keys(t.Context(), "*").Val(); len(keys) != 0 {
			t.Errorf("server %d holds %q after Unlock; want nothing", i, keys)
		}
	}
}
