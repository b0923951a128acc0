package lock_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/lock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(child(spec))
	}
	// After failed dials to a killed server, go-redis keeps one goroutine
	// per pool probing the address once a second, even past Close; it is
	// the client's, not ours.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// childEnv carries the job of a child process started by startChild: the
// test binary re-executed to hold or wait for a lock until it is killed.
const childEnv = "DOGPILE_LOCK_CHILD"

// child runs in a re-executed test binary. spec is "addr kind name": it
// acquires (kind "sem2" takes 2 permits of a 4-permit semaphore, "rlock"
// read-locks an RWMutex, "fair" locks a fair mutex), prints "held FENCE",
// and then holds with auto-extension until it is killed.
func child(spec string) int {
	var addr, kind, name string
	if _, err := fmt.Sscan(spec, &addr, &kind, &name); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	opts := []lock.Option{lock.WithTTL(300 * time.Millisecond), lock.WithAutoExtend()}
	ctx := context.Background()
	var l *lock.Lease
	var err error
	switch kind {
	case "sem2":
		l, err = lock.NewSemaphore(rdb, name, 4, opts...).Acquire(ctx, 2)
	case "rlock":
		l, err = lock.NewRWMutex(rdb, name, opts...).RLock(ctx)
	case "fair":
		l, err = lock.NewMutex(rdb, name, append(opts, lock.WithFair())...).Lock(ctx)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("held", l.Fence())
	time.Sleep(time.Hour) // until SIGKILL
	return 0
}

// A holder is a child process that acquires a lock and holds it, renewing
// its lease, until it is killed with SIGKILL: a crashed process, with no
// chance to clean up.
type holder struct {
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// startChild starts a child doing kind on the lock name of the Redis at addr.
func startChild(t *testing.T, addr, kind, name string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+addr+" "+kind+" "+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, lines: bufio.NewScanner(out)}
	t.Cleanup(h.kill)
	return h
}

// held waits until the child reports that it holds the lock.
func (h *holder) held(t *testing.T) {
	t.Helper()
	if !h.lines.Scan() || !strings.HasPrefix(h.lines.Text(), "held ") {
		t.Fatalf("child: %q, %v; want held", h.lines.Text(), h.lines.Err())
	}
}

// kill sends SIGKILL and reaps the child.
func (h *holder) kill() {
	if h.cmd.ProcessState == nil {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	}
}
