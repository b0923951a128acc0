package dogpile_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// goid is the calling goroutine's number, from its stack's first line.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return string(bytes.Fields(b)[1])
}

// TestLeaderRunsItsFlight: a Fetch whose context cannot end runs its miss,
// compute included, in its own goroutine (no hand-off on a cold miss's
// path); one whose context can end leaves it to another goroutine, so that
// it may leave at its deadline. Either way a caller that joins the flight
// with a deadline leaves at that deadline while the leader computes on.
func TestLeaderRunsItsFlight(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := s.Client(t)
	c := dogpile.New[string](rdb, prefix(t))
	defer c.Close()
	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	for name, ctx := range map[string]context.Context{"background": context.Background(), "cancellable": cancelled} {
		t.Run(name, func(t *testing.T) {
			caller, computing, release := goid(), make(chan struct{}), make(chan struct{})
			var in string
			fetched := make(chan error, 1)
			go func() {
				caller = goid()
				_, err := c.Fetch(ctx, name, time.Minute, func(context.Context) (string, error) {
					in = goid()
					close(computing)
					<-release
					return "v", nil
				})
				fetched <- err
			}()
			<-computing
			short, stop := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer stop()
			if _, err := c.Fetch(short, name, time.Minute, redistest.Constant("joined")); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a caller that joined the flight with a deadline: %v; want DeadlineExceeded", err)
			}
			close(release)
			require.NoError(t, <-fetched)
			if here := in == caller; here != (ctx.Done() == nil) {
				t.Errorf("compute ran in the caller's goroutine: %v; want %v", here, ctx.Done() == nil)
			}
			if v, err := c.Get(context.Background(), name); assert.NoError(t, err, "Get = %q, %v; want the computed value", v, err) {
				assert.Equal(t, "v", v, "Get = %q, %v; want the computed value", v, err)
			}
		})
	}
}
