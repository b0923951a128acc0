package dogpile_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
)

// These examples run against miniredis, an in-memory Redis for tests, so
// that their output is checked by go test. In production the client points
// at a real Redis or Redis Cluster.

// newTestRedis starts an in-memory Redis and returns it with a client.
func newTestRedis() (*miniredis.Miniredis, *redis.Client) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	return m, redis.NewClient(&redis.Options{Addr: m.Addr()})
}

func ExampleCache_Set() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb)

	// Set writes through: a compute of "42" running anywhere at this moment
	// loses its lock and cannot overwrite this value.
	if err := beers.Set(ctx, "42", Beer{Name: "Pils", ABV: 4.8}, time.Hour); err != nil {
		panic(err)
	}
	b, err := beers.Get(ctx, "42")
	fmt.Println(b.Name, b.ABV, err)
	// Output: Pils 4.8 <nil>
}

func ExampleCache_Delete() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb)

	_ = beers.Set(ctx, "42", Beer{Name: "Pils"}, time.Hour)
	if err := beers.Delete(ctx, "42"); err != nil {
		panic(err)
	}
	_, err := beers.Get(ctx, "42")
	fmt.Println(errors.Is(err, dogpile.ErrMiss))
	// Output: true
}

func ExampleCache_Stats() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb)

	load := func(ctx context.Context) (Beer, error) { return Beer{Name: "Pils"}, nil }
	for range 3 {
		if _, err := beers.Fetch(ctx, "42", time.Minute, load); err != nil {
			panic(err)
		}
	}
	s := beers.Stats()
	fmt.Printf("hits %d, misses %d, computes %d\n", s.Hits, s.Misses, s.Computes)
	// Output: hits 2, misses 1, computes 1
}

func ExampleWithPrefix() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	// Two caches on one Redis keep apart by prefix; the cache key is wrapped
	// in a hash tag so that all of one key's Redis keys share a cluster slot.
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"))
	_ = beers.Set(ctx, "42", Beer{Name: "Pils"}, time.Hour)
	fmt.Println(m.Keys())
	// Output: [beers:{42}]
}

// jsonCodec stores values as JSON, readable with redis-cli.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func ExampleWithCodec() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"), dogpile.WithCodec(jsonCodec{}))

	_ = beers.Set(ctx, "42", Beer{Name: "Pils", ABV: 4.8}, time.Hour)
	raw, _ := rdb.Get(ctx, "beers:{42}").Bytes()
	// The stored bytes are a 3-byte header (magic and format version), then
	// the codec's bytes.
	fmt.Printf("%s\n", raw[3:])
	// Output: {"Name":"Pils","ABV":4.8}
}

// Example_testingWithMiniredis shows how to test code that uses a Cache
// without a Redis server: miniredis runs in the test process, and
// FastForward moves its clock so that TTLs expire without sleeping.
func Example_testingWithMiniredis() {
	m, rdb := newTestRedis() // in a test: m := miniredis.RunT(t)
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb)

	loads := 0
	load := func(ctx context.Context) (Beer, error) {
		loads++
		return Beer{Name: fmt.Sprintf("Pils #%d", loads)}, nil
	}
	b, _ := beers.Fetch(ctx, "42", time.Minute, load)
	fmt.Println(b.Name)
	b, _ = beers.Fetch(ctx, "42", time.Minute, load) // a hit
	fmt.Println(b.Name)

	m.FastForward(61 * time.Second) // the value's TTL runs out
	b, _ = beers.Fetch(ctx, "42", time.Minute, load)
	fmt.Println(b.Name)
	// Output:
	// Pils #1
	// Pils #1
	// Pils #2
}

func ExampleCache_FetchMany() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb)
	_ = beers.Set(ctx, "1", Beer{Name: "Pils", ABV: 4.8}, time.Hour)
	db := map[string]Beer{"2": {Name: "Stout", ABV: 5.5}, "3": {Name: "Bock", ABV: 6.8}}

	// One read for the hits, one compute for the rest: compute gets only the
	// keys that no process has cached or is computing (duplicates once).
	got, err := beers.FetchMany(ctx, []string{"1", "2", "3", "4", "2"}, time.Hour,
		func(ctx context.Context, missing []string) (map[string]Beer, error) {
			fmt.Println("loading", missing)
			found := map[string]Beer{}
			for _, id := range missing {
				if b, ok := db[id]; ok {
					found[id] = b
				}
			}
			return found, nil // "4" is left out: it does not exist
		})
	for _, id := range []string{"1", "2", "3", "4"} {
		b, ok := got[id]
		fmt.Println(id, b.Name, ok)
	}
	fmt.Println(err)
	// Output:
	// loading [2 3 4]
	// 1 Pils true
	// 2 Stout true
	// 3 Bock true
	// 4  false
	// <nil>
}

// Clear drops every value of a Cache, in every process, after an import
// that changed everything, say.
func ExampleCache_Clear() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	prices := dogpile.New[int](rdb, dogpile.WithPrefix("price:"))
	for _, sku := range []string{"a", "b", "c"} {
		if err := prices.Set(ctx, sku, 100, time.Hour); err != nil {
			panic(err)
		}
	}
	if err := prices.Clear(ctx); err != nil {
		panic(err)
	}
	_, err := prices.Get(ctx, "a")
	fmt.Println(errors.Is(err, dogpile.ErrMiss), "keys left:", len(m.Keys()))
	// Output:
	// true keys left: 0
}
