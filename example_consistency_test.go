package dogpile_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/dogpile-go/dogpile"
)

// A near tier whose consistency is measured in production: one near hit in
// a hundred is compared with Redis in the background. A hit of a value that
// Redis had replaced, and that the tier would still serve once its 100 ms
// bound has passed, is counted and reported with its key. On a real Redis
// the repeated Fetch is answered from memory and checked; miniredis, used
// here, cannot track keys, so the tier turns itself off and nothing is
// checked.
func ExampleWithConsistencySampling() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	load := func(ctx context.Context) (Beer, error) { return Beer{Name: "Pils", ABV: 4.8}, nil }
	beers := dogpile.New[Beer](rdb, dogpile.WithNearCache(10_000), dogpile.WithConsistencySampling(0.01),
		dogpile.WithObserver(func(ctx context.Context, e dogpile.Event) context.Context {
			if e.Kind == dogpile.EventInconsistent && e.Near {
				log.Printf("near tier served %q past its bound", e.Key) // alert on it
			}
			return nil
		}))
	defer beers.Close()

	for range 3 {
		b, _ := beers.Fetch(ctx, "42", time.Hour, load)
		fmt.Println(b.Name)
	}
	st := beers.Stats()
	fmt.Println("checked:", st.NearSampled, "inconsistent:", st.NearInconsistent)
	// Output:
	// Pils
	// Pils
	// Pils
	// checked: 0 inconsistent: 0
}

// The cache checked against the database behind it. A program updates a
// row and forgets to Delete the cached value: a second after a hit, the
// check reads the row through verify and finds it differs from what was
// served; a second later Redis still holds that value, so no write of the
// cache is on its way, and the key is reported. (Here every hit is checked;
// in production a small fraction is.)
func ExampleWithSourceCheck() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	var mu sync.Mutex
	db := map[string]Beer{"42": {Name: "Pils", ABV: 4.8}} // the source of truth
	read := func(ctx context.Context, key string) (Beer, error) {
		mu.Lock()
		defer mu.Unlock()
		b, ok := db[key]
		if !ok {
			return Beer{}, dogpile.ErrNotFound
		}
		return b, nil
	}
	found := make(chan string, 1)
	beers := dogpile.New[Beer](rdb, dogpile.WithSourceCheck(1, read),
		dogpile.WithObserver(func(ctx context.Context, e dogpile.Event) context.Context {
			if e.Kind == dogpile.EventInconsistent && !e.Near {
				select {
				case found <- e.Key:
				default:
				}
			}
			return nil
		}))
	defer beers.Close()

	load := func(ctx context.Context) (Beer, error) { return read(ctx, "42") }
	b, _ := beers.Fetch(ctx, "42", time.Hour, load) // a miss: computed and stored
	fmt.Println(b.Name)

	mu.Lock()
	db["42"] = Beer{Name: "Pils (new recipe)", ABV: 5.0} // and no beers.Delete(ctx, "42")
	mu.Unlock()

	b, _ = beers.Fetch(ctx, "42", time.Hour, load) // a hit, checked two seconds later
	fmt.Println(b.Name)
	select {
	case key := <-found:
		st := beers.Stats()
		fmt.Println("inconsistent:", key, st.SourceInconsistent, "of", st.SourceSampled)
	case <-time.After(time.Minute):
		fmt.Println("no inconsistency found")
	}
	// Output:
	// Pils
	// Pils
	// inconsistent: 42 1 of 1
}
