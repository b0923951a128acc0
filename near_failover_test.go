package dogpile

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestNearSessionEndsWithItsContext: a tracking session ends as soon as its
// context does, not when its read times out (a ping later): a tracker that
// stops or moves to a Cluster's new masters bypasses the tier at once.
func TestNearSessionEndsWithItsContext(t *testing.T) {
	s := redistest.StartServer(t)
	tr := newTracker(s.Client(t), "p:", &nearIndex{}, func(string) {})
	var refused atomic.Pointer[error]
	cl := redis.NewClient(trackingOptions(s.Client(t).Options(), "p:", &refused))
	defer cl.Close()
	defer func(ping time.Duration) { nearPing = ping }(nearPing)
	nearPing = time.Hour // no tracker runs in this test
	ctx, cancel := context.WithCancel(t.Context())
	up := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		_ = tr.session(ctx, cl, func() { close(up) })
	}()
	<-up
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end within 10 s of its context")
	}
}
