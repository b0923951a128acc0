package dogpile_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dogpile-go/dogpile"
)

func ExampleCache_HotKeys() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"))
	load := func(context.Context) (Beer, error) { return Beer{Name: "Pils"}, nil }

	// Beer 42 is read ten times as often as beer 7, and beer 1 once.
	// (HotKeys reports this process's reads over the last one to two
	// minutes; every Cache keeps its own.)
	for i := range 11_000 {
		key := "42"
		if i%11 == 10 {
			key = "7"
		}
		beers.Fetch(ctx, key, time.Hour, load)
	}
	beers.Fetch(ctx, "1", time.Hour, load)

	// The two most read. Hits are sampled, so Reads is an estimate (here
	// rounded to hundreds); Misses and Computes are exact.
	for _, h := range beers.HotKeys(2) {
		fmt.Printf("%s: about %d reads, %d miss, %d compute\n", h.Key, (h.Reads+50)/100*100, h.Misses, h.Computes)
	}
	// Output:
	// 42: about 10000 reads, 1 miss, 1 compute
	// 7: about 1000 reads, 1 miss, 1 compute
}
