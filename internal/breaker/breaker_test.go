package breaker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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
	b := New()
	for _, err := range []error{errors.New("ERR script"), context.Canceled, redis.ErrPoolTimeout, nil} {
		done, aerr := b.Allow()
		if aerr != nil {
			t.Fatalf("Allow after %v = %v", err, aerr)
		}
		done(err)
		if b.Open() {
			t.Fatalf("done(%v) opened the circuit", err)
		}
	}
	done, _ := b.Allow()
	done(io.EOF)
	if !b.Open() {
		t.Fatal("done(EOF) left the circuit closed")
	}
	if _, err := b.Allow(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Allow with the circuit open = %v; want ErrUnavailable", err)
	}
	time.Sleep(cooldown + 10*time.Millisecond)
	probe, err := b.Allow()
	if err != nil {
		t.Fatalf("Allow after the cooldown = %v; want the probe through", err)
	}
	if _, err := b.Allow(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("second Allow during the probe = %v; want ErrUnavailable", err)
	}
	probe(nil)
	if b.Open() {
		t.Error("a probe's success left the circuit open")
	}
	if _, err := b.Allow(); err != nil {
		t.Errorf("Allow after the probe = %v; want nil", err)
	}
}

// BenchmarkAllow is the breaker's cost on every hit: a call through a
// closed circuit that succeeds, from 1 and from many goroutines.
func BenchmarkAllow(b *testing.B) {
	br := New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			done, err := br.Allow()
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
	b := New()
	if n := testing.AllocsPerRun(1000, func() {
		done, _ := b.Allow()
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

// TestTimeoutsInARow: one socket timeout (a caller's short deadline on
// one slow reply, with ContextTimeoutEnabled) leaves the circuit closed,
// and so do two with a success between; three in a row (a frozen server)
// open it.
func TestTimeoutsInARow(t *testing.T) {
	b := New()
	slow := &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}
	for _, step := range []struct {
		err  error
		open bool
	}{
		{slow, false}, {slow, false}, {nil, false}, // reset
		{slow, false}, {slow, false}, {slow, true},
	} {
		done, err := b.Allow()
		if err != nil {
			t.Fatalf("Allow = %v with the circuit closed", err)
		}
		done(step.err)
		if b.Open() != step.open {
			t.Fatalf("after %v: Open = %v; want %v", step.err, b.Open(), step.open)
		}
	}
}

// TestDialTimeoutOpens: a dial that times out while its caller still waits
// (a server that drops packets: DialTimeout passes) opens the circuit,
// although Go reports it as context.DeadlineExceeded; one that the
// caller's own context ended does not.
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
		if b.Open() == callerGone {
			t.Errorf("caller gone %v: Open = %v after a dial timeout", callerGone, b.Open())
		}
		_ = rdb.Close()
	}
}
