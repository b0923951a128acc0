package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// Two processes share a Redis; the first keeps hot values in its own memory.
// A Set in the second reaches the first through Redis's invalidation
// message. On a real Redis the first's repeated Fetch is answered from
// memory (Stats().NearHits); miniredis, used here, cannot track keys, so the
// near tier turns itself off (Stats().NearOff) and every Fetch reads Redis:
// the answers are the same, never stale.
func ExampleWithNearCache() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	load := func(ctx context.Context) (Beer, error) { return Beer{Name: "Pils", ABV: 4.8}, nil }

	web := dogpile.New[Beer](rdb, dogpile.WithNearCache(10_000)) // process A
	admin := dogpile.New[Beer](rdb)                              // process B

	for range 3 {
		b, _ := web.Fetch(ctx, "42", time.Hour, load) // after the first: from memory
		fmt.Println(b.Name)
	}
	// B's write reaches A's tier as an invalidation message (on a real
	// server, well under a millisecond on loopback: see bench/README.md);
	// a Fetch of A that starts after it arrived never returns the old value.
	// Here, on miniredis, the tier is off and A reads Redis.
	_ = admin.Set(ctx, "42", Beer{Name: "Pils (new recipe)", ABV: 5.0}, time.Hour)
	b, _ := web.Fetch(ctx, "42", time.Hour, load)
	fmt.Println(b.Name)

	// A's tracker found that miniredis refuses CLIENT TRACKING, or soon will.
	off := redistest.Within(redistest.EventuallyWithin, func() bool { return web.Stats().NearOff })
	fmt.Println("near tier off:", off)
	// Output:
	// Pils
	// Pils
	// Pils
	// Pils (new recipe)
	// near tier off: true
}

// A Cache that answers from its near tier's copies while Redis is
// unreachable, instead of failing. On a real Redis, once the client's
// circuit is open, a Fetch of a key the tier held returns the copy as a
// stale hit (Stats().StaleIfDown) until the value's TTL plus its stale
// window has passed, and never once Redis answers again. Here, on
// miniredis, which cannot track keys, the tier is off: there is no copy,
// and the Fetch fails with ErrUnavailable, as without the option.
func ExampleWithStaleIfDown() {
	m, rdb := newTestRedis()
	defer rdb.Close()
	ctx := context.Background()
	load := func(ctx context.Context) (Beer, error) { return Beer{Name: "Pils", ABV: 4.8}, nil }
	beers := dogpile.New[Beer](rdb, dogpile.WithNearCache(10_000), dogpile.WithStale(time.Hour), dogpile.WithStaleIfDown())
	defer beers.Close()

	b, _ := beers.Fetch(ctx, "42", time.Minute, load)
	fmt.Println(b.Name)

	m.Close() // Redis goes away: the circuit opens once a call has met the refused dial
	var err error
	redistest.Within(redistest.EventuallyWithin, func() bool {
		_, err = beers.Fetch(ctx, "42", time.Minute, load)
		return errors.Is(err, dogpile.ErrUnavailable)
	})
	fmt.Println("unavailable:", errors.Is(err, dogpile.ErrUnavailable), "copies served:", beers.Stats().StaleIfDown)
	// Output:
	// Pils
	// unavailable: true copies served: 0
}
