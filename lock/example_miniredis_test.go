package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/lock"
)

// These examples run against miniredis, an in-memory Redis for tests, so
// that their output is checked by go test.

func newTestRedis() (*miniredis.Miniredis, *redis.Client) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	return m, redis.NewClient(&redis.Options{Addr: m.Addr()})
}

// A holder whose work takes longer than planned extends its lease; an
// extension succeeds only while the lease is still held.
func ExampleLease_Extend() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	lease, err := lock.NewMutex(rdb, "report", lock.WithTTL(10*time.Second)).Lock(ctx)
	if err != nil {
		panic(err)
	}
	if err := lease.Extend(ctx, time.Minute); err != nil {
		panic(err)
	}
	ttl, _ := lease.TTL(ctx)
	fmt.Println(ttl > 50*time.Second)

	_ = lease.Unlock(ctx)
	err = lease.Extend(ctx, time.Minute) // too late: it was released
	fmt.Println(errors.Is(err, lock.ErrNotHeld))
	// Output:
	// true
	// true
}

// Two permits: two holders at once, the third would wait.
func ExampleSemaphore() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	api := lock.NewSemaphore(rdb, "partner-api", 2)
	a, _, _ := api.TryAcquire(ctx, 1)
	b, _, _ := api.TryAcquire(ctx, 1)
	_, ok, err := api.TryAcquire(ctx, 1)
	fmt.Println("third got a permit:", ok, err)

	_ = a.Unlock(ctx)
	n, _ := api.Available(ctx)
	fmt.Println("available after one release:", n)
	_ = b.Unlock(ctx)
	// Output:
	// third got a permit: false <nil>
	// available after one release: 1
}

// Tests of code that locks need no Redis server: miniredis runs in the test
// process (miniredis.RunT(t) in a test), and FastForward moves its clock so
// that a crashed holder's lease runs out without sleeping.
func Example_testingWithMiniredis() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()
	mu := lock.NewMutex(rdb, "job", lock.WithTTL(5*time.Second))

	_, _, _ = mu.TryLock(ctx) // a holder that crashes without unlocking
	_, ok, _ := mu.TryLock(ctx)
	fmt.Println("obtained while held:", ok)

	m.FastForward(6 * time.Second) // its lease expires
	lease, ok, _ := mu.TryLock(ctx)
	fmt.Println("obtained after its TTL:", ok)
	_ = lease.Unlock(ctx)
	// Output:
	// obtained while held: false
	// obtained after its TTL: true
}
