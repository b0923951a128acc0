package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/lock"
)

// The examples in this file run against an embedded miniredis, so that
// go test checks their output; use your own Redis instead.
func embeddedRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

// A caller that cannot wait long tells a busy lock from its own trouble.
func ExampleErrNotObtained() {
	rdb, closeAll := embeddedRedis()
	defer closeAll()
	ctx := context.Background()

	invoice := lock.NewMutex(rdb, "invoice:42")
	other, err := invoice.Lock(ctx) // another worker holds it
	if err != nil {
		log.Fatal(err)
	}
	defer other.Unlock(ctx)

	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = invoice.Lock(wctx)
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		fmt.Println("busy, try later; deadline:", errors.Is(err, context.DeadlineExceeded))
	case err != nil:
		fmt.Println("Redis trouble:", err)
	}
	// Output: busy, try later; deadline: true
}

// Locked tells whether anyone holds a mutex, without taking it: remote_lock's
// acquired?, for a status page or a health check.
func ExampleMutex_Locked() {
	rdb, closeAll := embeddedRedis()
	defer closeAll()
	ctx := context.Background()

	report := lock.NewMutex(rdb, "nightly-report")
	busy, _ := report.Locked(ctx)
	fmt.Println("report running:", busy)
	lease, err := report.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	busy, _ = report.Locked(ctx)
	fmt.Println("report running:", busy)
	lease.Unlock(ctx)
	// Output:
	// report running: false
	// report running: true
}

// Locked counts readers as well as a writer.
func ExampleRWMutex_Locked() {
	rdb, closeAll := embeddedRedis()
	defer closeAll()
	ctx := context.Background()

	menu := lock.NewRWMutex(rdb, "menu")
	r, err := menu.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	held, _ := menu.Locked(ctx)
	fmt.Println("locked while read:", held)
	r.Unlock(ctx)
	held, _ = menu.Locked(ctx)
	fmt.Println("locked after:", held)
	// Output:
	// locked while read: true
	// locked after: false
}

// Locks named per request leave only their fencing counter behind, and
// that only for the retention.
func ExampleWithRetention() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	for _, invoice := range []string{"invoice:41", "invoice:42"} {
		err := lock.Do(ctx, rdb, invoice, func(context.Context, *lock.Lease) error {
			return nil // send the invoice
		}, lock.WithRetention(time.Hour))
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("keys after the work:", rdb.DBSize(ctx).Val())
	mr.FastForward(time.Hour) // miniredis's clock; a real server's just runs
	fmt.Println("keys an hour later:", rdb.DBSize(ctx).Val())
	// Output:
	// keys after the work: 2
	// keys an hour later: 0
}
