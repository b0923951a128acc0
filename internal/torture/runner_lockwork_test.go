package torture

// runner_lockwork_test.go is a worker's lock goroutine: critical
// sections of every primitive of the lock package, recording when each
// was entered and left, its fencing numbers and whether its lease was
// lost.

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dogpile-go/dogpile/lock"
)

const (
	// maxHold is the longest an ordinary critical section lasts: far below
	// the TTL, so that only faults make a lease lapse.
	maxHold = 30 * time.Millisecond
	// maxPause is the longest pause between two sections of a goroutine.
	maxPause = 10 * time.Millisecond
)

// lockLoop runs random critical sections until ctx is done.
func (w *worker) lockLoop(ctx context.Context, g int) {
	r := w.rng(g)
	for ctx.Err() == nil {
		pause := time.Duration(r.Int64N(int64(maxPause)))
		if !w.section(r, g) {
			pause += failPause
		}
		sleep(ctx, pause)
	}
}

// An acquire takes a lock for one section.
type acquire func(ctx context.Context) (*lock.Lease, error)

// section acquires a random lock, holds it for a while (or until its lease
// ends) and releases it. It reports whether it acquired the lock.
func (w *worker) section(r *rand.Rand, g int) bool {
	opts := []lock.Option{lock.WithTTL(w.plan.LockTTL)}
	hold := time.Duration(1 + r.Int64N(int64(maxHold)))
	if r.IntN(4) == 0 {
		opts = append(opts, lock.WithAutoExtend())
		if r.IntN(4) == 0 {
			hold = w.plan.LockTTL * 3 / 2 // extended past the TTL
		}
	}
	kind, names, weight, acq := w.pick(r, opts)
	op := w.begin(g, kind, 0, names...)
	op.Weight = weight
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	lease, err := acq(ctx)
	cancel()
	if err != nil {
		w.end(op, err)
		return false
	}
	op.Enter = time.Now().UnixNano()
	op.Fences = lease.Fences()
	w.led.Write(op)
	t := time.NewTimer(hold)
	select {
	case <-t.C:
	case <-lease.Done():
		op.Lost = true
	}
	t.Stop()
	op.Exit = time.Now().UnixNano()
	// On the ledger before Unlock's round trip: a process killed during it
	// (seed 13316096286122341316: a lease lapsed on arrival, its Unlock's
	// reply dropped) has still left its section, and the next holder
	// entered after that.
	w.led.Write(op)
	ctx, cancel = context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	w.end(op, lease.Unlock(ctx))
	return true
}

// pick chooses the primitive of a section: its kind, names, weight and
// how to acquire it.
func (w *worker) pick(r *rand.Rand, opts []lock.Option) (string, []string, int64, acquire) {
	p := w.plan
	name := p.Mutexes[r.IntN(len(p.Mutexes))]
	switch x := r.IntN(100); {
	case x < 25:
		return KMutex, []string{name}, 0, lock.NewMutex(w.rdb, name, opts...).Lock
	case x < 40:
		return KFair, []string{name}, 0, lock.NewMutex(w.rdb, name, append(opts, lock.WithFair())...).Lock
	case x < 52:
		perm := r.Perm(len(p.Mutexes))
		names := []string{p.Mutexes[perm[0]], p.Mutexes[perm[1]]}
		return KMulti, names, 0, lock.NewMultiMutex(w.rdb, names, opts...).Lock
	case x < 70:
		n := 1 + r.Int64N(2)
		sem := lock.NewSemaphore(w.rdb, p.Sem, p.Permits, opts...)
		return KSem, []string{p.Sem}, n, func(ctx context.Context) (*lock.Lease, error) { return sem.Acquire(ctx, n) }
	case x < 90:
		return KRLock, []string{p.RW}, 0, lock.NewRWMutex(w.rdb, p.RW, opts...).RLock
	default:
		return KWLock, []string{p.RW}, 0, lock.NewRWMutex(w.rdb, p.RW, opts...).Lock
	}
}
