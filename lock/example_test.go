package lock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/dogpile-go/dogpile/lock"
	"github.com/redis/go-redis/v9"
)

// Examples that need a Redis server have no Output line: they are compiled
// and checked by go vet, but not run by go test.

func ExampleMutex_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	tap := lock.NewMutex(rdb, "beer-tap", lock.WithTTL(3*time.Second))
	lease, err := tap.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	fmt.Println("drinking, fence", lease.Fence())
}

func ExampleMutex_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	lease, ok, err := lock.NewMutex(rdb, "nightly-report").TryLock(ctx)
	switch {
	case err != nil:
		log.Fatal(err)
	case !ok:
		fmt.Println("another process is writing the report")
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("writing the report")
}

// A lease with auto-extension may outlive its TTL; its Done channel tells
// the holder when it can no longer trust that it holds the lock.
func ExampleLease_Done() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	lease, err := lock.NewMutex(rdb, "migration", lock.WithTTL(5*time.Second), lock.WithAutoExtend()).Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	for step := range 100 {
		select {
		case <-lease.Done():
			log.Printf("lock lost at step %d: %v", step, lease.Err())
			return
		default:
		}
		// Pass lease.Fence() to the storage so it can reject stale writers.
	}
}

func ExampleDo() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	err := lock.Do(context.Background(), rdb, "invoice:42", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost while this runs.
		return nil
	}, lock.WithWaitTimeout(3*time.Second))
	if err != nil {
		log.Println("not sent:", err)
	}
}
