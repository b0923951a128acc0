package lock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

func TestMain(m *testing.M) {
	redistest.ChildMain(map[string]func(*redistest.Parent){"hold": hold})
	// Four parallel tests at once, not GOMAXPROCS (2 here): they wait on
	// servers of their own far more than they compute (see
	// redistest.WaitingParallel).
	redistest.WaitingParallel(4)
	// WithSpareClusters: StartCluster takes a cluster joined while
	// earlier tests ran, instead of waiting out a fresh one's 2 s.
	// After failed dials to a killed server, go-redis keeps one goroutine
	// per pool probing the address once a second, even past Close; it is
	// the client's, not ours.
	goleak.VerifyTestMain(redistest.WithSpareClusters(m), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// A holding is what a holder child takes: Kind "sem2" takes 2 permits of
// a 4-permit semaphore, "rlock" read-locks an RWMutex, "fair" locks a fair
// mutex, each named Name on the Redis at Addr.
type holding struct{ Addr, Kind, Name string }

// hold runs in a child process: it takes its holding with a 1 s lease,
// says "held", and holds it with auto-extension until it is killed.
func hold(p *redistest.Parent) {
	var h holding
	p.Params(&h)
	rdb := redis.NewClient(&redis.Options{Addr: h.Addr})
	// 1s, not 300ms: a child (a -race binary) stalled by a loaded machine
	// must not lose what it holds while the test counts on it.
	opts := []lock.Option{lock.WithTTL(time.Second), lock.WithAutoExtend()}
	ctx := context.Background()
	var err error
	switch h.Kind {
	case "sem2":
		_, err = lock.NewSemaphore(rdb, h.Name, 4, opts...).Acquire(ctx, 2)
	case "rlock":
		_, err = lock.NewRWMutex(rdb, h.Name, opts...).RLock(ctx)
	case "fair":
		_, err = lock.NewMutex(rdb, h.Name, append(opts, lock.WithFair())...).Lock(ctx)
	default:
		err = fmt.Errorf("unknown kind %q", h.Kind)
	}
	if err != nil {
		p.Fatalf("%s %s: %v", h.Kind, h.Name, err)
	}
	p.Say("held")
	time.Sleep(time.Hour) // until SIGKILL
}

// A holder is a child process that acquires a lock and holds it, renewing
// its lease, until it is killed with SIGKILL: a crashed process, with no
// chance to clean up.
type holder struct{ *redistest.Child }

// startChild starts a child doing kind on the lock name of the Redis at addr.
func startChild(t *testing.T, addr, kind, name string) *holder {
	t.Helper()
	return &holder{redistest.StartChild(t, "hold", holding{addr, kind, name})}
}

// held waits until the child reports that it holds the lock.
func (h *holder) held(t *testing.T) {
	t.Helper()
	h.Expect(t, "held")
}

// kill sends SIGKILL and waits for the child to exit.
func (h *holder) kill() { h.Kill() }
