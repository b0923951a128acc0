package demo

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

// ServerFlags registers the -redis and -embedded flags that both programs
// share. After flag.Parse, the returned function gives the Redis to use
// and the address to probe, as [Connect] takes them.
func ServerFlags() func() (redis, probe string) {
	r := flag.String("redis", os.Getenv("REDIS_URL"), "Redis `URL` (redis://, rediss://; several comma-separated addresses for a cluster); default $REDIS_URL, else localhost:6379 if it answers, else an embedded miniredis")
	embedded := flag.Bool("embedded", false, "use an embedded miniredis even if a Redis answers on localhost:6379")
	return func() (string, string) {
		if *embedded {
			return "", ""
		}
		return *r, DefaultProbe
	}
}

// Main runs run until it returns or the user interrupts, and exits with
// status 1, after printing the error prefixed by name, if it failed.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
