package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
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

	refreshed := func() bool { // the refresh runs in the background
		v, _ = prices.Get(ctx, "beer")
		return prices.Stats().Refreshes > 0 && v != 100
	}
	if !redistest.Within(redistest.EventuallyWithin, refreshed) {
		fmt.Println("no refresh within", redistest.EventuallyWithin)
	}
	fmt.Println("after the refresh:", v)
	// Output:
	// first fill: 100
	// stale, served at once: 100
	// after the refresh: 120
}

// Expire makes a value stale at once: with WithStale it is still served,
// while one process refreshes it, as when the upstream said it changed.
func ExampleCache_Expire() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	prices := dogpile.New[int](rdb, dogpile.WithStale(time.Hour))

	price := 100
	load := func(ctx context.Context) (int, error) { return price, nil }
	v, _ := prices.Fetch(ctx, "beer", time.Hour, load)
	fmt.Println("first fill:", v)

	price = 120
	_ = prices.Expire(ctx, "beer") // the price list changed upstream
	v, _ = prices.Fetch(ctx, "beer", time.Hour, load)
	fmt.Println("stale, served at once:", v)

	refreshed := func() bool {
		v, _ = prices.Get(ctx, "beer")
		return v == 120
	}
	if !redistest.Within(redistest.EventuallyWithin, refreshed) {
		fmt.Println("no refresh within", redistest.EventuallyWithin)
	}
	fmt.Println("after the refresh:", v)
	// Output:
	// first fill: 100
	// stale, served at once: 100
	// after the refresh: 120
}

// Previous lets a refresh ask its source whether anything changed since
// the value it replaces, and keep that value if not.
func ExamplePrevious() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	type page struct {
		ETag, Body string
	}
	pages := dogpile.New[page](rdb)

	fetch := func(ctx context.Context) (page, error) {
		if old, ok := dogpile.Previous[page](ctx); ok && old.ETag == "v7" {
			fmt.Println("not modified since", old.ETag) // e.g. HTTP 304: nothing to download
			return old, nil
		}
		fmt.Println("downloading")
		return page{ETag: "v7", Body: "<html>…"}, nil
	}
	_, _ = pages.Fetch(ctx, "/menu", time.Hour, fetch)
	p, _ := pages.Refresh(ctx, "/menu", time.Hour, fetch)
	fmt.Println(p.ETag)
	// Output:
	// downloading
	// not modified since v7
	// v7
}

// With WithSoftTimeout, the caller that finds a stale value waits a little
// for the refresh: a quick backend's new value reaches it at once.
func ExampleWithSoftTimeout() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	prices := dogpile.New[int](rdb, dogpile.WithStale(time.Hour), dogpile.WithSoftTimeout(time.Second))

	price := 100
	load := func(ctx context.Context) (int, error) { return price, nil }
	v, _ := prices.Fetch(ctx, "beer", time.Minute, load)
	fmt.Println("first fill:", v)

	price = 120
	m.FastForward(2 * time.Minute) // past the TTL, within the stale window
	v, _ = prices.Fetch(ctx, "beer", time.Minute, load)
	fmt.Println("stale, refreshed within the soft timeout:", v)
	// Output:
	// first fill: 100
	// stale, refreshed within the soft timeout: 120
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

// With WithDefaultTTL, a ttl of 0 means the Cache's default.
func ExampleWithDefaultTTL() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	menus := dogpile.New[string](rdb, dogpile.WithPrefix("menu:"), dogpile.WithDefaultTTL(10*time.Minute))

	_, _ = menus.Fetch(ctx, "today", 0, func(ctx context.Context) (string, error) { return "goulash", nil })
	_ = menus.Set(ctx, "tomorrow", "schnitzel", 0)
	fmt.Println(m.TTL("menu:{today}"), m.TTL("menu:{tomorrow}"))
	// Output: 10m0s 10m0s
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
	refreshed := func() bool {
		b, _ = beers.Get(ctx, "42")
		return beers.Stats().Refreshes > 0 && b.Name != "Pils #1"
	}
	if !redistest.Within(redistest.EventuallyWithin, refreshed) {
		fmt.Println("no early refresh within", redistest.EventuallyWithin)
	}
	fmt.Println("refreshed early:", b.Name)
	// Output:
	// served: Pils #1
	// refreshed early: Pils #2
}

// Values filled together (after a deploy, by one FetchMany) expire over a
// spread of times instead of all at once.
func ExampleWithTTLJitter() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	prices := dogpile.New[int](rdb, dogpile.WithPrefix("price:"), dogpile.WithTTLJitter(0.1))

	seen := map[time.Duration]bool{}
	for i := range 20 {
		key := fmt.Sprint(i)
		if err := prices.Set(ctx, key, i, time.Hour); err != nil {
			panic(err)
		}
		ttl := m.TTL("price:{" + key + "}")
		if ttl < 54*time.Minute || ttl > 66*time.Minute {
			panic(ttl)
		}
		seen[ttl.Round(time.Second)] = true
	}
	fmt.Println("TTLs within an hour ± 10%; distinct:", len(seen) > 10)
	// Output:
	// TTLs within an hour ± 10%; distinct: true
}

// Large values are stored compressed; reads decompress them.
func ExampleWithCompression() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	pages := dogpile.New[string](rdb, dogpile.WithPrefix("page:"), dogpile.WithCompression(1024))

	html := strings.Repeat("<li>a row of a long, repetitive listing</li>\n", 2000)
	if err := pages.Set(ctx, "home", html, time.Hour); err != nil {
		panic(err)
	}
	stored, _ := m.Get("page:{home}")
	page, _ := pages.Get(ctx, "home")
	fmt.Println("value", len(page), "bytes; stored in under a tenth:", len(stored) < len(html)/10)
	// Output:
	// value 90000 bytes; stored in under a tenth: true
}

// Tag the values computed from a user's rows with the user; when the user
// changes, InvalidateTag drops every one of them, in every process.
func ExampleTag() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	pages := dogpile.New[string](rdb, dogpile.WithPrefix("page:"))

	render := func(page string) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			dogpile.Tag(ctx, "user:42") // before reading the user's rows
			return page + " of user 42", nil
		}
	}
	for _, page := range []string{"profile", "orders"} {
		if _, err := pages.Fetch(ctx, page+":42", time.Hour, render(page)); err != nil {
			panic(err)
		}
	}
	if err := pages.InvalidateTag(ctx, "user:42"); err != nil { // the user changed
		panic(err)
	}
	_, err := pages.Get(ctx, "orders:42")
	fmt.Println("orders page after the invalidation:", err)
	// Output:
	// orders page after the invalidation: dogpile: miss
}
