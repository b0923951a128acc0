package benchmarks

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// replicaAckLibs are the plain mutex and the same mutex whose acquires
// (and extensions) wait for one replica with lock.WithReplicaAck.
var replicaAckLibs = []mutexLib{
	{
		name: "dogpile/lock",
		how:  "lock.NewMutex defaults, TTL 10s",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			return mutexLocker(lock.NewMutex(rdb, name, lock.WithTTL(lockTTL)))
		},
	},
	{
		name: "dogpile/lock+replica-ack",
		how:  "lock.NewMutex with lock.WithReplicaAck(1, time.Second): WAIT 1 1000 after each acquire, on the script's connection; TTL 10s",
		newLocker: func(rdb *redis.Client, name string, _ int) locker {
			return mutexLocker(lock.NewMutex(rdb, name, lock.WithTTL(lockTTL), lock.WithReplicaAck(1, time.Second)))
		},
	},
}

// mutexLocker adapts m to locker.
func mutexLocker(m *lock.Mutex) locker {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := m.Lock(ctx)
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	}
}

// BenchmarkReplicaAck measures what lock.WithReplicaAck(1, time.Second)
// costs a Lock+Unlock against the plain mutex, both on the master of a
// Sentinel deployment whose one replica is in sync (the plain mutex's
// writes are replicated too, unacknowledged), in the same run: the ratio of
// the two is the option's cost. Scenarios as BenchmarkMutex's
// uncontended ones:
//
//   - uncontended-G1: one goroutine, Lock then Unlock, one name. ns/op is
//     one Lock+Unlock, the acquire's WAIT included.
//   - uncontended-G16: 16 goroutines, a name each. ns/op is the wall time
//     per Lock+Unlock of the whole group; an acknowledged acquire goes to
//     Redis on its own, where plain ones beyond 2×GOMAXPROCS share
//     pipelines.
//
// The metrics are runMutex's; srv-µs/op and srv-cmds/op are the master's
// (WAIT, and the REPLCONF GETACK/ACK exchange it starts, included), not
// the replica's.
func BenchmarkReplicaAck(b *testing.B) {
	s := redistest.StartSentinel(b)
	for _, lib := range replicaAckLibs {
		b.Logf("%s: %s", lib.name, lib.how)
	}
	for _, sc := range []mutexScenario{
		{name: "uncontended-G1", g: 1},
		{name: "uncontended-G16", g: 16},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for _, lib := range rotated(replicaAckLibs) {
				b.Run(lib.name, func(b *testing.B) {
					runMutex(b, s.Master.Addr(), lib, sc)
				})
			}
		})
	}
}
