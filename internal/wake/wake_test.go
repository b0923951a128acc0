package wake

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// woken reports how many of subs have a wake-up pending, draining them.
func woken(subs []*Sub) int {
	n := 0
	for _, s := range subs {
		select {
		case <-s.Wake():
			n++
		case <-time.After(200 * time.Millisecond):
		}
	}
	return n
}

func TestWakeOneAndAll(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	var subs []*Sub
	for range 5 {
		s, err := Subscribe(ctx, rdb, "ch")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs = append(subs, s)
	}
	rdb.Publish(ctx, "ch", One)
	if got := woken(subs); got != 1 {
		t.Errorf("payload One woke %d subs; want 1", got)
	}
	rdb.Publish(ctx, "ch", "all")
	if got := woken(subs); got != 5 {
		t.Errorf("broadcast woke %d subs; want 5", got)
	}
	rdb.Publish(ctx, "other", "all")
	if got := woken(subs); got != 0 {
		t.Errorf("message on another channel woke %d subs", got)
	}
}

func TestWakeOneServesLongestWaiterAndHandsOff(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	first, _ := Subscribe(ctx, rdb, "ch")
	second, _ := Subscribe(ctx, rdb, "ch")
	defer second.Close()
	rdb.Publish(ctx, "ch", One)
	deadline := time.Now().Add(5 * time.Second)
	for len(first.c)+len(second.c) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // until the message arrives
	}
	if len(first.c) != 1 || len(second.c) != 0 {
		t.Fatalf("pending wake-ups first=%d second=%d; want the longest waiter woken", len(first.c), len(second.c))
	}
	first.Close() // leaves without acting on it: the wake-up moves on
	if got := woken([]*Sub{second}); got != 1 {
		t.Error("wake-up lost when its receiver left")
	}
}

func TestOneConnectionForAllWaiters(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t) // miniredis has no CLIENT LIST
	ctx := t.Context()
	for i := range 100 {
		s, err := Subscribe(ctx, rdb, "ch"+string(rune('a'+i%26)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	list := rdb.ClientList(ctx).Val()
	if n := strings.Count(list, "sub="); n == 0 {
		t.Fatalf("CLIENT LIST has no sub= field: %s", list)
	}
	subscribers := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			subscribers++
		}
	}
	if subscribers != 1 {
		t.Errorf("%d subscribed connections for 100 waiters; want 1", subscribers)
	}
}

func TestShardedOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	ctx := t.Context()
	var subs []*Sub
	for _, ch := range []string{"{a}:wake", "{b}:wake", "{c}:wake", "{d}:wake"} {
		s, err := Subscribe(ctx, rdb, ch)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs = append(subs, s)
		if err := rdb.SPublish(ctx, ch, "all").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := woken(subs); got != 4 {
		t.Errorf("sharded messages woke %d of 4 subs", got)
	}
}

func TestIdleConnectionCloses(t *testing.T) {
	rdb := redistest.Start(t)
	s, err := Subscribe(t.Context(), rdb, "ch")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	deadline := time.Now().Add(10 * linger)
	for {
		hubsMu.Lock()
		n := len(hubs)
		hubsMu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("idle subscription connection still open")
		}
		time.Sleep(linger / 5)
	}
}

func TestSubscribeRedisDown(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	srv.Kill()
	if s, err := Subscribe(t.Context(), rdb, "ch"); err == nil || s != nil {
		t.Errorf("Subscribe with Redis down = %v, %v; want nil, error", s, err)
	}
}

func TestPayloadOfLatestMessage(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	a, err := Subscribe(ctx, rdb, "ch")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Subscribe(ctx, rdb, "ch")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if p := a.Payload(); p != "" {
		t.Errorf("Payload before any message = %q; want \"\"", p)
	}
	rdb.Publish(ctx, "ch", "v1")
	if got := woken([]*Sub{a, b}); got != 2 {
		t.Fatalf("broadcast woke %d subs; want 2", got)
	}
	if pa, pb := a.Payload(), b.Payload(); pa != "v1" || pb != "v1" {
		t.Errorf("Payloads = %q, %q; want \"v1\" for both", pa, pb)
	}
	// Two messages before the waiter looks: one wake-up, the later payload.
	rdb.Publish(ctx, "ch", "v2")
	rdb.Publish(ctx, "ch", "v3")
	if got := woken([]*Sub{a}); got != 1 {
		t.Fatalf("woke %d; want 1", got)
	}
	for a.Payload() != "v3" { // v3 may still be on its way
		select {
		case <-a.Wake():
		case <-time.After(2 * time.Second):
			t.Fatalf("Payload = %q; want \"v3\"", a.Payload())
		}
	}
	var nilSub *Sub
	if p := nilSub.Payload(); p != "" {
		t.Errorf("nil Sub Payload = %q", p)
	}
}

func TestWaitingCounts(t *testing.T) {
	rdb := redistest.Start(t)
	other := redistest.Start(t)
	if n := Waiting(rdb, "ch"); n != 0 {
		t.Fatalf("Waiting before any Sub = %d", n)
	}
	a, _ := Subscribe(t.Context(), rdb, "ch")
	b, _ := Subscribe(t.Context(), rdb, "ch")
	c, _ := Subscribe(t.Context(), other, "ch")
	if n := Waiting(rdb, "ch"); n != 2 {
		t.Errorf("Waiting = %d; want 2 (the other client's Sub does not count)", n)
	}
	a.Close()
	b.Close()
	b.Close() // twice: must not count down twice
	if n := Waiting(rdb, "ch"); n != 0 {
		t.Errorf("Waiting after Close = %d; want 0", n)
	}
	if n := Waiting(other, "ch"); n != 1 {
		t.Errorf("Waiting(other) = %d; want 1", n)
	}
	c.Close()
}
