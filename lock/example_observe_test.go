package lock_test

import (
	"context"
	"fmt"

	"github.com/dogpile-go/dogpile/lock"
)

func ExampleWithObserver() {
	m, rdb := newTestRedis()
	defer m.Close()
	defer rdb.Close()
	ctx := context.Background()

	// An observer sees acquisitions (with their wait), extensions, losses
	// and releases; dogpileotel.New().Lock records them as OpenTelemetry
	// metrics, labelled by primitive, never by lock name.
	observe := func(_ context.Context, e lock.Event) {
		names := map[lock.EventKind]string{lock.EventObtained: "obtained", lock.EventNotObtained: "not obtained",
			lock.EventExtended: "extended", lock.EventLost: "lost", lock.EventReleased: "released"}
		fmt.Println(e.Lock, e.Name, names[e.Kind])
	}
	mu := lock.NewMutex(rdb, "invoice:17", lock.WithObserver(observe))
	l, _ := mu.Lock(ctx)
	mu.TryLock(ctx) // busy
	l.Unlock(ctx)
	// Output:
	// mutex invoice:17 obtained
	// mutex invoice:17 not obtained
	// mutex invoice:17 released
}
