package dogpile_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dogpile-go/dogpile"
)

func ExampleWithObserver() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	// An observer sees every hit, miss, compute and wait; this one prints
	// them. dogpileotel.New().Cache records OpenTelemetry metrics and spans.
	observe := func(ctx context.Context, e dogpile.Event) context.Context {
		switch e.Kind {
		case dogpile.EventHit:
			fmt.Println("hit", e.Prefix, e.Key)
		case dogpile.EventMiss:
			fmt.Println("miss", e.Prefix, e.Key)
		case dogpile.EventComputeStart:
			fmt.Println("compute start")
		case dogpile.EventComputeEnd:
			fmt.Println("compute end, error:", e.Err)
		}
		return nil // keep ctx
	}
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"), dogpile.WithObserver(observe))
	load := func(context.Context) (Beer, error) { return Beer{Name: "Pils"}, nil }
	beers.Fetch(ctx, "42", time.Hour, load)
	beers.Fetch(ctx, "42", time.Hour, load)
	// Output:
	// compute start
	// compute end, error: <nil>
	// miss beers: 42
	// hit beers: 42
}

func ExampleWithLogger() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()

	// Rare events only: a compute's panic (with its stack, dropped here to
	// keep the output short), bytes that do not decode, a takeover, Redis
	// unreachable and back. Never a hit or a miss.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "stack" {
				return slog.Attr{}
			}
			return a
		},
	}))
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix("beers:"), dogpile.WithLogger(logger))
	_, err := beers.Fetch(context.Background(), "42", time.Hour, func(context.Context) (Beer, error) {
		panic("brewery on fire")
	})
	fmt.Println(err)
	// Output:
	// level=ERROR msg="dogpile: compute panicked" panic="brewery on fire" prefix=beers: key=42
	// dogpile: compute panicked: brewery on fire
}
