package near

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNearSessionEndsWithItsContext: a tracking session ends as soon as its
// context does, not when its read times out (a ping later): a tracker that
// stops or moves to a Cluster's new masters bypasses the tier at once.
func TestNearSessionEndsWithItsContext(t *testing.T) {
	s := redistest.StartServer(t)
	tr := NewTracker(s.Client(t), "p:", NewIndex(Handlers{}), func(string) {})
	var refused atomic.Pointer[error]
	cl := redis.NewClient(trackingOptions(s.Client(t).Options(), "p:", &refused, new(atomic.Int64)))
	defer cl.Close()
	defer func(ping time.Duration) { Ping = ping }(Ping)
	Ping = time.Hour // no tracker runs in this test
	ctx, cancel := context.WithCancel(t.Context())
	up := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = tr.session(ctx, cl, new(atomic.Int64), func() func() { close(up); return func() {} })
	}()
	<-up
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end within 10 s of its context")
	}
}

// TestNearRefusal: only a lasting refusal of CLIENT TRACKING (no
// permission, a command or option the server does not know) turns the
// near tier off for good; a server busy with a script, loading, in a
// failover, full of clients or memory, or between two passwords is tried
// again.
func TestNearRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{replyErr("ERR unknown subcommand 'TRACKING'"), true},
		{replyErr("NOPERM this user has no permissions to run the 'client' command"), true},
		{replyErr("BUSY Redis is busy running a script"), false},
		{replyErr("LOADING Redis is loading the dataset in memory"), false},
		{replyErr("MASTERDOWN Link with MASTER is down"), false},
		{replyErr("ERR unknown subcommand 'tracking'. Try CLIENT HELP."), true},
		{replyErr("ERR Unknown subcommand or wrong number of arguments for 'TRACKING'. Try CLIENT HELP"), true},
		{replyErr("ERR syntax error"), true},
		{replyErr("NOPERM User u has no permissions to access the '__redis__:invalidate' channel"), true},
		{replyErr("ERR max number of clients reached"), false},
		{replyErr("OOM command not allowed when used memory > 'maxmemory'."), false},
		{replyErr("WRONGPASS invalid username-password pair or user is disabled."), false},
		{replyErr("NOAUTH Authentication required."), false},
		{io.EOF, false},
	} {
		if got := refusal(tc.err); got != tc.want {
			t.Errorf("refusal(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

// replyErr is an error reply, as go-redis returns them (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestOwnerLive: a reader's values are served while its connection has
// not failed and answered a command sent within MaxLag.
func TestOwnerLive(t *testing.T) {
	o := new(Owner)
	o.heard.Store(1000)
	for _, tc := range []struct {
		now  int64
		dead bool
		want bool
	}{
		{1000, false, true},
		{1000 + int64(MaxLag), false, true},
		{1001 + int64(MaxLag), false, false},
		{1000, true, false},
	} {
		o.dead.Store(tc.dead)
		if got := o.Live(tc.now); got != tc.want {
			t.Errorf("Live(heard + %v), dead %v = %v; want %v", time.Duration(tc.now-1000), tc.dead, got, tc.want)
		}
	}
}
