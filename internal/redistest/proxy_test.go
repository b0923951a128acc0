package redistest

import (
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestProxyDropsReplyAfterTheCommandRan(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	p := StartProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	p.DropNextReply()
	if err := rdb.Set(t.Context(), "k", "v", 0).Err(); err == nil {
		t.Fatal("SET with its reply dropped = nil; want an error")
	}
	if p.Dropped() != 1 {
		t.Errorf("Dropped = %d; want 1", p.Dropped())
	}
	if got := s.Client(t).Get(t.Context(), "k").Val(); got != "v" {
		t.Errorf("k = %q after the dropped reply; want v: the server ran the command", got)
	}
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING after the drop: %v; want the next reply through", err)
	}
}

func TestProxyDelaysRepliesInOrder(t *testing.T) {
	t.Parallel()
	const delay = 150 * time.Millisecond
	s := StartServer(t)
	p := StartProxy(t, s.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: time.Minute})
	defer rdb.Close()
	// The caller that gives up, connected before the delay, else its
	// handshake times out and its command is never sent.
	short := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: delay / 3})
	defer short.Close()
	for _, c := range []*redis.Client{rdb, short} {
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}

	p.DelayReplies(delay)
	start := time.Now()
	cmds, err := rdb.Pipelined(t.Context(), func(pipe redis.Pipeliner) error {
		pipe.Set(t.Context(), "k", "1", 0)
		pipe.Incr(t.Context(), "k")
		return nil
	})
	if took := time.Since(start); took < delay {
		t.Errorf("a delayed reply came after %v; want ≥ %v", took, delay)
	}
	if err != nil || cmds[1].(*redis.IntCmd).Val() != 2 {
		t.Errorf("pipeline through the delay = %v, %v; want INCR's 2 in order", cmds, err)
	}

	// A caller that gives up before the reply: the server has run it.
	if err := short.Set(t.Context(), "late", "v", 0).Err(); err == nil {
		t.Error("SET with a read timeout below the delay = nil; want a timeout")
	}
	if got := s.Client(t).Get(t.Context(), "late").Val(); got != "v" {
		t.Errorf("late = %q; want v: a delayed reply is late, not lost", got)
	}

	p.DelayReplies(0)
	if err := short.Ping(t.Context()).Err(); err != nil {
		t.Errorf("PING once the delay is off: %v", err)
	}
}

// TestProxyDelaysEachReplyFromItsArrival: a reply that comes while an
// earlier one is held back waits d from its own arrival, not d after the
// earlier one is let through (which made a delay of d one of up to 2d).
func TestProxyDelaysEachReplyFromItsArrival(t *testing.T) {
	t.Parallel()
	// A whole second: the defect (the second reply held back twice, 2d
	// after the first request) and a loaded machine's lateness must not
	// meet.
	const d = time.Second
	s := StartServer(t)
	p := StartProxy(t, s.Addr())
	p.DelayReplies(d)
	cn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cn.Close()
	start := time.Now()
	if _, err := cn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d / 2) // the second request goes while the first reply is held
	if _, err := cn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	second := time.Since(start)
	got, buf := 0, make([]byte, 64)
	for got < len("+PONG\r\n+PONG\r\n") {
		n, err := cn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	// The second reply is due d after it was sent, about 1.5d; held back
	// twice, it came at 2d.
	if took := time.Since(start); took > second+d+d/4 {
		t.Errorf("the second reply came %v after the first request; want about %v", took, second+d)
	}
}

// TestProxyDelaysRequests: a request held back reaches the server after a
// later one sent on another connection, once its caller has given up.
func TestProxyDelaysRequests(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	p := StartProxy(t, s.Addr())
	early := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	defer early.Close()
	later := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer later.Close()
	for _, c := range []*redis.Client{early, later} {
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}

	p.DelayRequests(2 * time.Second) // long beside the next two round trips, on a loaded machine too
	if err := early.Set(t.Context(), "k", "early", 0).Err(); err == nil {
		t.Fatal("SET held back past its read timeout = nil; want a timeout")
	}
	p.DelayRequests(0) // the held SET keeps its delay
	if err := later.Set(t.Context(), "k", "later", 0).Err(); err != nil {
		t.Fatal(err)
	}
	direct := s.Client(t)
	if got := direct.Get(t.Context(), "k").Val(); got != "later" {
		t.Fatalf("k = %q before the held SET was sent on; want later", got)
	}
	Eventually(t, "the held SET sent on", func() bool { return p.HeldRequests() == 0 })
	Eventually(t, "the held SET run", func() bool { return direct.Get(t.Context(), "k").Val() == "early" })
}
