package memcache_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	gomemcache "github.com/bradfitz/gomemcache/memcache"

	mclock "github.com/dogpile-go/dogpile/lock/memcache"
)

func Example() {
	ctx := context.Background()
	client := gomemcache.New(exampleAddr) // e.g. "127.0.0.1:11211"
	m := mclock.NewMutex(client, "invoice:42", mclock.WithTTL(5*time.Second))

	l, err := m.Lock(ctx)
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	_, ok, err := m.TryLock(ctx) // another owner, say another process
	fmt.Println("second owner got it:", ok, err)

	fmt.Println("unlock:", l.Unlock(ctx))
	fmt.Println("unlock again:", errors.Is(l.Unlock(ctx), mclock.ErrNotHeld))
	// Output:
	// second owner got it: false <nil>
	// unlock: <nil>
	// unlock again: true
}

func ExampleDo() {
	client := gomemcache.New(exampleAddr)
	err := mclock.Do(context.Background(), client, "nightly-report", func(ctx context.Context, _ *mclock.Lease) error {
		// ctx is cancelled if the lease is lost; the lease extends itself
		// meanwhile.
		fmt.Println("only one process runs this at a time")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// only one process runs this at a time
	// err: <nil>
}

func ExampleNewMutex_badInput() {
	client := gomemcache.New(exampleAddr)
	_, err := mclock.NewMutex(client, "").Lock(context.Background()) // a name taken from a request, say
	fmt.Println(errors.Is(err, mclock.ErrInvalid), err)
	// Output:
	// true lock: invalid argument: empty lock name
}
