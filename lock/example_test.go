package lock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/lock"
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

	err := lock.Do(context.Background(), rdb, "invoice:42", func(ctx context.Context, l *lock.Lease) error {
		// ctx is cancelled if the lock is lost while this runs; the fence
		// lets the storage reject a holder whose lease ran out unnoticed.
		return sendInvoice(ctx, 42, l.Fence())
	}, lock.WithWaitTimeout(3*time.Second))
	if err != nil {
		log.Println("not sent:", err)
	}
}

// At most four processes, fleet-wide, call the slow API at once; the
// others queue in arrival order.
func ExampleSemaphore_Acquire() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	api := lock.NewSemaphore(rdb, "partner-api", 4, lock.WithAutoExtend())
	lease, err := api.Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx) // gives the permit back; a crash gives it back within the TTL
	fmt.Println("calling the API")
}

func ExampleRWMutex_RLock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	menu := lock.NewRWMutex(rdb, "menu")
	r, err := menu.RLock(ctx) // many readers at once, unless a writer waits
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reading the menu")
	if w, err := menu.Upgrade(ctx, r); err == nil { // only if we are the sole reader
		fmt.Println("rewriting the menu")
		w.Unlock(ctx)
	} else {
		r.Unlock(ctx) // errors.Is(err, lock.ErrUpgrade): others are reading
	}
}

// Booking a stay locks the host's calendar and the property together,
// without deadlocking against a caller that names them in the other order.
func ExampleMultiMutex_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	ctx := context.Background()

	both := lock.NewMultiMutex(rdb, []string{"property:7", "calendar:host:3"})
	lease, err := both.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	fmt.Println("fences:", lease.Fences())
}

func ExampleRedlock_Lock() {
	var servers []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		servers = append(servers, c)
	}
	ctx := context.Background()

	lease, err := lock.NewRedlock(servers, "nightly-job", lock.WithTTL(30*time.Second)).Lock(ctx)
	if err != nil {
		log.Fatal(err) // a majority was unreachable, or ctx ended
	}
	defer lease.Unlock(ctx)
	fmt.Println("running on any 2 of 3 servers")
}

// sendInvoice stands for the work done under a lock: it records the fence
// with what it writes and refuses a write with a lower one.
func sendInvoice(ctx context.Context, id int, fence int64) error { return ctx.Err() }
