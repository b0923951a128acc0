package dogpile

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestFirstLookAdapts: a Cache whose first looks mostly miss looks with
// the lock script at once (a miss sends no GET before it; a hit is that
// script's one round trip, counted as a hit), and with a GET once most
// hit, as a new Cache does. A Cache with a freshness option always looks
// with a GET.
func TestFirstLookAdapts(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	cmds := countCommands(rdb)
	ctx := context.Background()
	first := func(c *Cache[string], key string) string {
		cmds.take()
		if _, err := c.Fetch(ctx, key, time.Minute, constant("v")); err != nil {
			t.Fatal(err)
		}
		return cmds.take()[0]
	}
	c := New[string](rdb, prefix(t))
	defer c.Close()
	for i := range lookScript + 1 {
		if cmd := first(c, fmt.Sprint("cold", i)); cmd != "get" {
			t.Fatalf("miss %d of a new Cache looked with %s; want get", i, cmd)
		}
	}
	if cmd := first(c, "cold"); cmd != "evalsha" {
		t.Errorf("a miss after %d misses in a row looked with %s; want the lock script", lookScript+1, cmd)
	}
	hits := c.Stats().Hits
	if cmd := first(c, "cold0"); cmd != "evalsha" {
		t.Errorf("a hit of a Cache that mostly misses looked with %s; want the lock script", cmd)
	}
	if n := c.Stats().Hits - hits; n != 1 {
		t.Errorf("a value found by the lock script counted as %d hits; want 1", n)
	}
	first(c, "cold1")
	if cmd := first(c, "cold2"); cmd != "get" {
		t.Errorf("the third hit in a row looked with %s; want get", cmd)
	}

	stale := New[string](rdb, WithPrefix(t.Name()+":stale:"), WithStale(time.Minute))
	defer stale.Close()
	for i := range 2 * lookMax {
		if cmd := first(stale, fmt.Sprint("cold", i)); cmd != "get" {
			t.Fatalf("miss %d of a Cache WithStale looked with %s; want get (its hits need the TTL)", i, cmd)
		}
	}
}
