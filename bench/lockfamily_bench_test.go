package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// BenchmarkSemaphore measures dogpile's fair semaphore under contention
// (issue 4): 16 goroutines share 4 permits, each acquiring 1, holding it
// 1 ms and asking again at once. No peer in this module has a semaphore, so
// it reports dogpile's own figures: acquisitions/s (ideal: 4 permits /
// (1 ms + a round trip)), wait p50/p99 and fairness (target ≤ 1.2). The
// 4-clients variant gives each group of 4 goroutines its own client, as 4
// processes.
func BenchmarkSemaphore(b *testing.B) {
	srv := redistest.StartServer(b)
	lib := mutexLib{
		name: "dogpile/lock",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			s := lock.NewSemaphore(rdb, name, 4, lock.WithTTL(lockTTL))
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := s.Acquire(ctx, 1)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		},
	}
	for _, sc := range []mutexScenario{
		{name: "permits4-G16-hold1ms", g: 16, hold: time.Millisecond, same: true, shared: true, clients: 1},
		{name: "permits4-G16-4clients-hold1ms", g: 16, hold: time.Millisecond, same: true, shared: true, clients: 4},
	} {
		b.Run(sc.name, func(b *testing.B) {
			b.Run(lib.name, func(b *testing.B) { runMutex(b, srv.Addr(), lib, sc) })
		})
	}
}

// BenchmarkRWMutex measures dogpile's writer-preferring RWMutex (issue 4):
// 8 readers and 1 writer on one name, each holding the lock 1 ms and asking
// again at once. Waits are reported for all and per role; "writer-share-%"
// is the writer's part of all acquisitions (a starved writer shows as ~0).
func BenchmarkRWMutex(b *testing.B) {
	srv := redistest.StartServer(b)
	const g = 9 // goroutine 8 is the writer
	lib := mutexLib{
		name: "dogpile/lock",
		newLocker: func(rdb *redis.Client, name string, i int) locker {
			rw := lock.NewRWMutex(rdb, name, lock.WithTTL(lockTTL))
			lockFn := rw.RLock
			if i == g-1 {
				lockFn = rw.Lock
			}
			return func(ctx context.Context) (func(context.Context) error, error) {
				l, err := lockFn(ctx)
				if err != nil {
					return nil, err
				}
				return l.Unlock, nil
			}
		},
	}
	role := func(i int) string {
		if i == g-1 {
			return "writer"
		}
		return "reader"
	}
	for _, sc := range []mutexScenario{
		{name: "R8-W1-hold1ms", g: g, hold: time.Millisecond, same: true, shared: true, clients: 1, role: role},
		{name: "R8-W1-9clients-hold1ms", g: g, hold: time.Millisecond, same: true, shared: true, clients: g, role: role},
	} {
		b.Run(sc.name, func(b *testing.B) {
			b.Run(lib.name, func(b *testing.B) { runMutex(b, srv.Addr(), lib, sc) })
		})
	}
}
