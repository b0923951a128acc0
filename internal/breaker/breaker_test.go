package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestUnreachable(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, err := range []error{dial, fmt.Errorf("get: %w", dial), io.EOF, syscall.ECONNRESET, redis.ErrClosed, ErrUnavailable,
		&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}} {
		if !Unreachable(err) {
			t.Errorf("Unreachable(%v) = false", err)
		}
	}
	for _, err := range []error{nil, redis.Nil, context.Canceled, context.DeadlineExceeded,
		fmt.Errorf("x: %w", context.DeadlineExceeded), errors.New("lock: a value without expiry"), redis.ErrPoolTimeout} {
		if Unreachable(err) {
			t.Errorf("Unreachable(%v) = true", err)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestBreaker: one unreachable failure opens the circuit; other errors do
// not; after the cooldown one probe goes through and its success closes it.
func TestBreaker(t *testing.T) {
	b := New(nil)
	for _, err := range []error{errors.New("ERR script"), context.Canceled, redis.ErrPoolTimeout, nil} {
		done, aerr := b.Allow(context.Background())
		if aerr != nil {
			t.Fatalf("Allow after %v = %v", err, aerr)
		}
		done(err)
		if b.Open() {
			t.Fatalf("done(%v) opened the circuit", err)
		}
	}
	done, _ := b.Allow(context.Background())
	done(io.EOF)
	if !b.Open() {
		t.Fatal("done(EOF) left the circuit closed")
	}
	if _, err := b.Allow(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Allow with the circuit open = %v; want ErrUnavailable", err)
	}
	time.Sleep(cooldown + 10*time.Millisecond)
	probe, err := b.Allow(context.Background())
	if err != nil {
		t.Fatalf("Allow after the cooldown = %v; want the probe through", err)
	}
	if _, err := b.Allow(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("second Allow during the probe = %v; want ErrUnavailable", err)
	}
	probe(nil)
	if b.Open() {
		t.Error("a probe's success left the circuit open")
	}
	if _, err := b.Allow(context.Background()); err != nil {
		t.Errorf("Allow after the probe = %v; want nil", err)
	}
}

// BenchmarkAllow is the breaker's cost on every hit: a call through a
// closed circuit that succeeds, from 1 and from many goroutines.
func BenchmarkAllow(b *testing.B) {
	br := New(nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			done, err := br.Allow(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			done(nil)
		}
	})
}

// TestClosedCostsNoAllocation: every hit asks the breaker; through a closed
// circuit that must not allocate.
func TestClosedCostsNoAllocation(t *testing.T) {
	b := New(nil)
	if n := testing.AllocsPerRun(1000, func() {
		done, _ := b.Allow(context.Background())
		done(nil)
	}); n != 0 {
		t.Errorf("%v allocations per call through a closed circuit; want 0", n)
	}
}

// TestBreakerGoesWithItsClient: For shares one breaker per client, and
// forgets it once the client is garbage: the registry holds no client
// (issue 20: every client ever made stayed, with its pools, for the
// process's life).
func TestBreakerGoesWithItsClient(t *testing.T) {
	count := breakers.Len
	before := count()
	for _, client := range []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
	} {
		if For(client) != For(client) {
			t.Errorf("%T: two breakers for one client", client)
		}
		_ = client.Close()
	}
	if n := count(); n != before+3 {
		t.Fatalf("%d breakers for 3 clients", n-before)
	}
	redistest.Collected(t, "the breakers of closed, unreachable clients to go", func() bool { return count() == before })
}

// TestTimeoutAsksTheServers: a call that timed out (a socket timeout, or
// the caller's deadline, as go-redis reports a read cut short when it had
// a retry left) opens nothing by itself: it starts a check of the
// servers, at most one per checkEvery, whose failure opens the circuit and
// names the servers; a check that finds them answering leaves it closed.
// A caller's cancellation and an exhausted pool start no check.
func TestTimeoutAsksTheServers(t *testing.T) {
	var checks atomic.Int32
	answer := make(chan error)
	b := New(func(context.Context) error { checks.Add(1); return <-answer })
	report := func(err error) {
		done, aerr := b.Allow(t.Context())
		if aerr != nil {
			t.Fatalf("Allow = %v with the circuit closed", aerr)
		}
		done(err)
	}
	for _, err := range []error{context.Canceled, redis.ErrPoolTimeout, fmt.Errorf("x: %w", redis.ErrPoolTimeout), nil} {
		report(err)
	}
	if n := checks.Load(); n != 0 {
		t.Fatalf("%d checks after a cancellation, a pool timeout and a success; want 0", n)
	}
	slow := &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}
	report(slow)
	report(fmt.Errorf("get: %w", context.DeadlineExceeded)) // while the first check runs: no second
	redistest.Eventually(t, "a check", func() bool { return checks.Load() == 1 })
	answer <- nil // the servers answer: a slow reply, or a busy client
	time.Sleep(checkEvery + 10*time.Millisecond)
	if b.Open() {
		t.Fatal("a timeout opened the circuit although the servers answered")
	}
	report(context.DeadlineExceeded)
	redistest.Eventually(t, "a second check", func() bool { return checks.Load() == 2 })
	answer <- &downError{"127.0.0.1:1: no reply to PING within 500ms"}
	redistest.Eventually(t, "the circuit open", b.Open)
	_, err := b.Allow(t.Context())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1:1: no reply to PING") {
		t.Errorf("Allow with the circuit open = %v; want ErrUnavailable naming the server and why", err)
	}
}

// TestProbeAsksTheServers: once the cooldown has passed, the next call
// waits while the servers are asked again; it goes on, the circuit closed,
// if they answer, and gets ErrUnavailable with their latest state if not.
func TestProbeAsksTheServers(t *testing.T) {
	var down atomic.Pointer[downError]
	down.Store(&downError{"a:1: dial: connect: connection refused"})
	b := New(func(context.Context) error {
		if d := down.Load(); d != nil {
			return d
		}
		return nil
	})
	b.Fail(down.Load())
	if _, err := b.Allow(t.Context()); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Allow with the circuit open = %v", err)
	}
	down.Store(&downError{"a:1: no reply to PING within 500ms"})
	time.Sleep(cooldown + 10*time.Millisecond)
	if _, err := b.Allow(t.Context()); err == nil || !strings.Contains(err.Error(), "no reply to PING") {
		t.Fatalf("probe while the server is still down = %v; want ErrUnavailable with the check's finding", err)
	}
	down.Store(nil)
	time.Sleep(cooldown + 10*time.Millisecond)
	done, err := b.Allow(t.Context())
	if err != nil {
		t.Fatalf("probe with the server back = %v; want the call through", err)
	}
	done(nil)
	if b.Open() {
		t.Error("the circuit is still open after the servers answered")
	}
}

// TestDialTimeoutOpens: a dial that times out while its caller still waits
// (a server that drops packets: DialTimeout passes) makes the breaker
// check the server, whose dial times out too, and the circuit opens,
// although Go reports a dial timeout as context.DeadlineExceeded; a dial
// that the caller's own context ended does not.
func TestDialTimeoutOpens(t *testing.T) {
	for _, callerGone := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1,
			Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
			}})
		b := For(rdb)
		ctx, cancel := context.WithCancel(context.Background())
		if callerGone {
			cancel()
		}
		_ = rdb.Ping(ctx).Err()
		cancel()
		if callerGone {
			time.Sleep(50 * time.Millisecond) // the fake dialer fails a check at once
			if b.Open() {
				t.Error("a dial that the caller's context ended opened the circuit")
			}
		} else {
			redistest.Eventually(t, "the circuit to open after a dial timeout", b.Open)
		}
		_ = rdb.Close()
	}
}
