package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestAcquireReplyLost: the acquire script runs on the server but its reply
// is lost with the connection. go-redis then resends it; the resent script
// must find its own token and succeed, with a fence above the lost one,
// instead of reporting the lock busy and leaving it orphaned for a whole
// TTL.
func TestAcquireReplyLost(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1})
	defer rdb.Close()
	m := lock.NewMutex(rdb, "flaky")
	warm, err := m.Lock(t.Context()) // loads the scripts, opens the connection
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(t.Context())

	proxy.DropNextReply()
	l, ok, err := m.TryLock(t.Context())
	if proxy.Dropped() != 1 {
		t.Fatalf("dropped %d replies; want 1", proxy.Dropped())
	}
	if !ok || err != nil {
		t.Fatalf("TryLock after a lost reply = %v, %v; want the lock (the retry sees its own token)", ok, err)
	}
	// The counter holds the last number drawn: the retry's, drawn after
	// the lost reply's.
	if f, _ := srv.Client(t).Get(t.Context(), "dogpile:mutex:{flaky}:fence").Int64(); l.Fence() <= warm.Fence() || l.Fence() != f {
		t.Errorf("fence = %d after %d, counter %d; want the counter's latest number, above the first", l.Fence(), warm.Fence(), f)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("Unlock: %v", err)
	}
}

// TestAcquireReplyLostNoRetry: without client retries, the acquire fails,
// and the lock it may have taken is removed at once, not left for a TTL.
func TestAcquireReplyLostNoRetry(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	m := lock.NewMutex(rdb, "flaky")
	warm, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(t.Context())

	proxy.DropNextReply()
	if _, ok, err := m.TryLock(t.Context()); ok || err == nil {
		t.Fatalf("TryLock with its reply lost and no retry = %v, %v; want an error", ok, err)
	}
	direct := srv.Client(t)
	if n := direct.Exists(t.Context(), "dogpile:mutex:{flaky}").Val(); n != 0 {
		t.Error("a failed acquire left the lock behind")
	}
	if f, _ := direct.Get(t.Context(), "dogpile:mutex:{flaky}:fence").Int64(); f <= warm.Fence() {
		t.Errorf("fence counter = %d; want above %d (the lost acquire did run)", f, warm.Fence())
	}
}

// TestWatchdogRidesOutLostRenewals: the replies of two renewals in a row
// are lost (the client does not retry by itself). The watchdog must retry
// promptly, with backoff, within the lease's safe deadline, and keep the
// lease: not wait a whole interval per attempt and let it expire.
func TestWatchdogRidesOutLostRenewals(t *testing.T) {
	const ttl = 600 * time.Millisecond
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	l, err := lock.NewMutex(rdb, "blips", lock.WithTTL(ttl), lock.WithAutoExtend()).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	proxy.DropReplies(2) // the next traffic is the watchdog's
	redistest.Eventually(t, "two dropped renewal replies", func() bool { return proxy.Dropped() >= 2 || l.Err() != nil })
	if l.Err() != nil {
		t.Fatalf("lease lost after %d dropped renewals: %v", proxy.Dropped(), l.Err())
	}
	// Past the first lease's safe deadline, and then some: only a renewal
	// after the two lost ones can have kept it.
	time.Sleep(time.Until(start.Add(ttl + ttl/2)))
	if err := l.Err(); err != nil {
		t.Fatalf("lease after two lost renewal replies: %v; want held", err)
	}
	if d, err := l.TTL(t.Context()); err != nil || d <= 0 {
		t.Errorf("TTL = %v, %v; want the lease alive in Redis", d, err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("Unlock = %v", err)
	}
}

// TestUpgradeReplyLost: the upgrade script runs but its reply is lost. The
// read lease became a write lock nobody knows it holds; without a rollback
// it would keep every reader and writer out for a whole TTL.
func TestUpgradeReplyLost(t *testing.T) {
	srv := redistest.StartServer(t)
	proxy := redistest.StartProxy(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	ctx := t.Context()
	rw := lock.NewRWMutex(rdb, "up", lock.WithTTL(time.Minute))
	warm, err := rw.RLock(ctx) // loads the scripts, opens the connection
	if err != nil {
		t.Fatal(err)
	}
	w, err := rw.Upgrade(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	w.Unlock(ctx)
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	proxy.DropNextReply()
	if _, err := rw.Upgrade(ctx, r); err == nil {
		t.Fatal("Upgrade with its reply lost succeeded")
	}
	if !errors.Is(r.Err(), lock.ErrLost) {
		t.Errorf("read lease Err = %v after a failed upgrade; want ErrLost (it may be gone)", r.Err())
	}
	lock.WaitRollbacks()
	direct := lock.NewRWMutex(srv.Client(t), "up")
	if locked, err := direct.Locked(ctx); err != nil || locked {
		t.Errorf("Locked after the rollback = %v, %v; want free", locked, err)
	}
}

func TestRedisKilled(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	m := lock.NewMutex(rdb, "doomed")
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := m.Lock(ctx); err == nil || ctx.Err() != nil {
		t.Errorf("Lock with Redis down = %v (ctx %v); want a prompt error", err, ctx.Err())
	}
	if _, ok, err := m.TryLock(ctx); ok || err == nil {
		t.Errorf("TryLock with Redis down = %v, %v; want false, error", ok, err)
	}
	if err := l.Unlock(ctx); err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock with Redis down = %v; want a Redis error", err)
	}
}

func TestRedisPausedWatchdogReportsLoss(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	l, err := lock.NewMutex(rdb, "paused", lock.WithTTL(150*time.Millisecond), lock.WithAutoExtend()).Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("lease not reported lost while Redis was paused")
	}
	if !errors.Is(l.Err(), lock.ErrLost) {
		t.Errorf("Err = %v; want ErrLost", l.Err())
	}
	srv.Resume()
	l.Unlock(t.Context())
}
