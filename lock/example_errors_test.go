package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dogpile-go/dogpile/lock"
	"github.com/redis/go-redis/v9"
)

// A caller that cannot wait long tells a busy lock from its own trouble.
// (This example runs against an embedded miniredis; use your Redis.)
func ExampleErrNotObtained() {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
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
