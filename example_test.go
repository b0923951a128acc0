package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
)

type Beer struct {
	Name string
	ABV  float64
}

// Example shows the read-through pattern: every process that shares the
// Redis server calls the loader at most once per expiry of the key.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"))

	b, err := beers.Fetch(context.Background(), "42", time.Minute, func(ctx context.Context) (Beer, error) {
		return Beer{Name: "Pils", ABV: 4.8}, nil // a slow query in real life
	})
	fmt.Println(b.Name, err)
}

func ExampleCache_Fetch() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"localhost:7000"}})
	defer rdb.Close()
	beers := dogpile.New[Beer](rdb,
		dogpile.WithLease(2*time.Second),        // a dead computing process is replaced within 2s
		dogpile.WithWaitTimeout(10*time.Second), // wait at most 10s for another process
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := beers.Fetch(ctx, "42", time.Hour, func(ctx context.Context) (Beer, error) {
		return Beer{Name: "Pils"}, nil
	})
	switch {
	case errors.Is(err, dogpile.ErrComputeFailed):
		fmt.Println("another process failed to load it:", err)
	case err != nil:
		fmt.Println("cache or loader error:", err)
	default:
		fmt.Println(b.Name)
	}
}

func ExampleCache_Get() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	beers := dogpile.New[Beer](rdb)
	b, err := beers.Get(context.Background(), "42")
	if errors.Is(err, dogpile.ErrMiss) {
		fmt.Println("not cached")
		return
	}
	fmt.Println(b.Name, err)
}

func ExampleWithComputeWhenDown() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	// Prefer serving from the database to failing while Redis is down.
	beers := dogpile.New[Beer](rdb, dogpile.WithComputeWhenDown())
	b, err := beers.Fetch(context.Background(), "42", time.Minute, func(ctx context.Context) (Beer, error) {
		return Beer{Name: "Pils"}, nil
	})
	fmt.Println(b.Name, err)
}

// ExampleMsgPack shows the default codec on its own.
func ExampleMsgPack() {
	b, err := dogpile.MsgPack.Marshal(Beer{Name: "Pils", ABV: 4.8})
	if err != nil {
		panic(err)
	}
	var got Beer
	err = dogpile.MsgPack.Unmarshal(b, &got)
	fmt.Println(got.Name, got.ABV, err)
	// Output: Pils 4.8 <nil>
}
