package dogpileotel_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/dogpileotel"
	"github.com/dogpile-go/dogpile/lock"
)

func Example() {
	m, err := miniredis.Run() // an in-memory Redis, so that the output is checked
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// In production: dogpileotel.New(), on the global providers that the
	// application's OpenTelemetry setup installs.
	reader := sdkmetric.NewManualReader()
	obs := dogpileotel.New(dogpileotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))

	users := dogpile.New[string](rdb, dogpile.WithPrefix("users:"), dogpile.WithObserver(obs.Cache))
	for range 3 {
		users.Fetch(ctx, "42", time.Minute, func(context.Context) (string, error) { return "Ada", nil })
	}
	lock.Do(ctx, rdb, "nightly-report", func(context.Context, *lock.Lease) error { return nil }, lock.WithObserver(obs.Lock))

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	got := collect(rm)
	fmt.Println("misses", got["dogpile.cache.requests{key_prefix=users:,result=miss}"])
	fmt.Println("hits", got["dogpile.cache.requests{key_prefix=users:,result=hit}"])
	fmt.Println("computes", got["dogpile.cache.compute.duration{error=false,key_prefix=users:,not_found=false,refresh=false}"])
	fmt.Println("locks obtained", got["dogpile.lock.events{event=obtained,lock=mutex}"])
	// Output:
	// misses 1
	// hits 2
	// computes 1
	// locks obtained 1
}

func ExampleObserver_Watch() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	obs := dogpileotel.New(dogpileotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		dogpileotel.WithHotKeys(2))

	// Caches of any value type; the session tokens are keys worth hiding,
	// and are labelled by rank.
	beers := dogpile.New[float64](rdb, dogpile.WithPrefix("beers:"))
	sessions := dogpile.New[string](rdb, dogpile.WithPrefix("sessions:"))
	defer obs.Watch(beers, dogpile.HideKeys(sessions))()
	for _, k := range []string{"pils", "pils", "pils", "stout", "ale"} {
		beers.Get(ctx, k) // misses, counted one by one (hits one in 64)
	}
	sessions.Get(ctx, "token-1f9a")

	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	got := collect(rm)
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if strings.HasPrefix(k, "dogpile.cache.hot_key.reads") {
			fmt.Println(k, got[k])
		}
	}
	// Output:
	// dogpile.cache.hot_key.reads{key=#1,key_prefix=sessions:} 1
	// dogpile.cache.hot_key.reads{key=ale,key_prefix=beers:} 1
	// dogpile.cache.hot_key.reads{key=pils,key_prefix=beers:} 3
}
