package redistest

import (
	"bytes"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// NoRetryClient returns a client of s that does not retry failed commands,
// so that tests of a dead server do not wait out go-redis's retry backoff.
func (s *Server) NoRetryClient(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// NopClient returns a client that is never used for I/O: its address
// accepts no connection (for tests of constructors, which do none).
func NopClient(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// A SyncBuffer is a bytes.Buffer for a logger that writes from background
// goroutines while the test reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
