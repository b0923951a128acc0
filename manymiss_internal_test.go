package dogpile

import (
	"context"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// TestLockManyAfterContextEnded: a FetchMany batch whose lock attempt
// begins after its context ended (its Cache closing) fails its keys with
// that context's error; it does not panic giving back a turn it never
// took (semaphore.Weighted refuses an ended context even with turns free).
func TestLockManyAfterContextEnded(t *testing.T) {
	c := New[string](redistest.StartServer(t).Client(t), prefix(t))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	vk := c.valueKey("k")
	b := &batch[string]{jobs: []*job[string]{newJob[string](flightID{Kind: fetchFlight, Key: vk}, "k", time.Minute, nil, nil)}}
	rs := c.lockMany(ctx, b, redisutil.Token())
	if len(rs) != 1 || rs[0].err == nil {
		t.Fatalf("lockMany on an ended context = %+v; want the key failed", rs)
	}
}
