package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dogpile-go/dogpile"
)

// With WithStale, a value past its TTL is served at once while one process
// in the fleet refreshes it in the background.
func ExampleWithStale() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	prices := dogpile.New[int](rdb, dogpile.WithStale(time.Hour))

	price := 100
	load := func(ctx context.Context) (int, error) { return price, nil }
	v, _ := prices.Fetch(ctx, "beer", time.Minute, load)
	fmt.Println("first fill:", v)

	price = 120
	m.FastForward(2 * time.Minute) // past the TTL, within the stale window
	v, _ = prices.Fetch(ctx, "beer", time.Minute, load)
	fmt.Println("stale, served at once:", v)

	for prices.Stats().Refreshes == 0 || v == 100 { // the refresh runs in the background
		time.Sleep(time.Millisecond)
		v, _ = prices.Get(ctx, "beer")
	}
	fmt.Println("after the refresh:", v)
	// Output:
	// first fill: 100
	// stale, served at once: 100
	// after the refresh: 120
}

// Negative caching: "not found" is remembered for a while, in every process.
func ExampleWithNegativeTTL() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb, dogpile.WithNegativeTTL(30*time.Second))

	calls := 0
	load := func(ctx context.Context) (Beer, error) {
		calls++
		return Beer{}, fmt.Errorf("beer 404: %w", dogpile.ErrNotFound)
	}
	for range 3 {
		_, err := beers.Fetch(ctx, "404", time.Hour, load)
		fmt.Println(errors.Is(err, dogpile.ErrNotFound))
	}
	fmt.Println("database calls:", calls)
	// Output:
	// true
	// true
	// true
	// database calls: 1
}

// Refresh recomputes now, even though a fresh value is cached: after a
// write to the database, for example.
func ExampleCache_Refresh() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb)

	_, _ = beers.Fetch(ctx, "42", time.Hour, func(ctx context.Context) (Beer, error) {
		return Beer{Name: "Pils"}, nil
	})
	b, err := beers.Refresh(ctx, "42", time.Hour, func(ctx context.Context) (Beer, error) {
		return Beer{Name: "Pils (new recipe)"}, nil
	})
	fmt.Println(b.Name, err)
	b, _ = beers.Get(ctx, "42")
	fmt.Println(b.Name)
	// Output:
	// Pils (new recipe) <nil>
	// Pils (new recipe)
}

// compute may choose its result's TTL, e.g. from an upstream's
// Cache-Control max-age; zero means "do not store".
func ExampleSetTTL() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	rates := dogpile.New[float64](rdb, dogpile.WithPrefix("rates:"))

	_, _ = rates.Fetch(ctx, "EUR", time.Hour, func(ctx context.Context) (float64, error) {
		dogpile.SetTTL(ctx, 5*time.Second) // the upstream said max-age=5
		return 1.08, nil
	})
	fmt.Println(m.TTL("rates:{EUR}"))
	// Output: 5s
}

// WithEarlyRefresh refreshes a hot key shortly before it expires, so that
// no caller waits for a compute.
func ExampleWithEarlyRefresh() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb, dogpile.WithEarlyRefresh(1), dogpile.WithStale(time.Minute))

	loads := 0
	load := func(ctx context.Context) (Beer, error) {
		loads++
		time.Sleep(10 * time.Millisecond) // how long the load takes sets how early it refreshes
		return Beer{Name: fmt.Sprint("Pils #", loads)}, nil
	}
	_, _ = beers.Fetch(ctx, "42", time.Minute, load)
	m.FastForward(time.Minute - time.Millisecond) // about to expire
	b, _ := beers.Fetch(ctx, "42", time.Minute, load)
	fmt.Println("served:", b.Name)
	for beers.Stats().Refreshes == 0 || b.Name == "Pils #1" {
		time.Sleep(time.Millisecond)
		b, _ = beers.Get(ctx, "42")
	}
	fmt.Println("refreshed early:", b.Name)
	// Output:
	// served: Pils #1
	// refreshed early: Pils #2
}
