package dogpile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/dogpile-go/dogpile"
)

func ExampleDebugHandler() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"))
	sessions := dogpile.New[string](rdb, dogpile.WithPrefix("sessions:"))
	beers.Fetch(ctx, "42", time.Hour, func(context.Context) (Beer, error) { return Beer{Name: "Pils"}, nil })
	beers.Fetch(ctx, "42", time.Hour, func(context.Context) (Beer, error) { return Beer{Name: "Pils"}, nil })
	sessions.Fetch(ctx, "token-1f9a", time.Hour, func(context.Context) (string, error) { return "ada", nil })

	// One page for every Cache of the process, on a port only operators
	// reach (here a request is served in memory): the session tokens are
	// keys worth hiding, the beers' are not.
	mux := http.NewServeMux()
	mux.Handle("/debug/dogpile", dogpile.DebugHandler(beers, dogpile.HideKeys(sessions)))
	// go http.ListenAndServe("localhost:6060", mux)

	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/debug/dogpile?format=json", nil))
	var page struct {
		Caches []struct {
			Prefix  string
			Stats   dogpile.Stats
			Ratios  map[string]*float64
			HotKeys []dogpile.HotKey
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
		panic(err)
	}
	for _, c := range page.Caches {
		fmt.Printf("%s %d hits, %d misses, hit ratio %.2f\n", c.Prefix, c.Stats.Hits, c.Stats.Misses, *c.Ratios["HitRatio"])
		for _, h := range c.HotKeys {
			fmt.Printf("  %s: %d miss, %d compute\n", h.Key, h.Misses, h.Computes)
		}
	}
	// Output:
	// beers: 1 hits, 1 misses, hit ratio 0.50
	//   42: 1 miss, 1 compute
	// sessions: 0 hits, 1 misses, hit ratio 0.00
	//   #1: 1 miss, 1 compute
}
