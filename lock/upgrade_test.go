package lock_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// upgradeHook acts on the commands sent with a context marked by mark: it
// holds back their reply until another script (the watchdog's renewal) has
// had its reply, or for at most hold; or, with dial set, fails them as a
// failed dial would, before anything is sent.
type upgradeHook struct {
	hold    time.Duration
	dial    bool
	renewed chan struct{} // a script sent with an unmarked context has replied
}

type markKey struct{}

func mark(ctx context.Context) context.Context { return context.WithValue(ctx, markKey{}, true) }

// process is a redistest.Hook's Process.
func (h *upgradeHook) process(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	marked := ctx.Value(markKey{}) != nil
	if marked && h.dial {
		err := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused by the test")}
		cmd.SetErr(err)
		return err
	}
	if marked {
		select { // only renewals that reply from now on count
		case <-h.renewed:
		default:
		}
	}
	err := next(ctx, cmd)
	switch {
	case marked && err == nil: // the upgrade has run (not a NOSCRIPT)
		select {
		case <-h.renewed:
		case <-time.After(h.hold):
		}
	case !marked && strings.HasPrefix(strings.ToLower(cmd.Name()), "eval"):
		select {
		case h.renewed <- struct{}{}:
		default:
		}
	}
	return err
}

// TestUpgradePausesReadWatchdog: the upgrade's reply is held back until
// the read lease's watchdog has made a renewal (or for 1.5 renewal
// intervals): the read lease, now the write lock, must end as released,
// not lost, and the observer must see no loss. Before the fix the watchdog
// ran on during the upgrade, its renewal found the read lease gone, and
// the lease reported EventLost.
func TestUpgradePausesReadWatchdog(t *testing.T) {
	onServerAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		const ttl = 900 * time.Millisecond
		h := &upgradeHook{hold: ttl / 2, renewed: make(chan struct{}, 1)}
		rdb.AddHook(redistest.Hook{Process: h.process})
		var rec recorder
		rw := lock.NewRWMutex(rdb, "upwd", lock.WithTTL(ttl), lock.WithAutoExtend(), lock.WithObserver(rec.observe))
		ctx := t.Context()
		r, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w, err := rw.Upgrade(mark(ctx), r)
		if err != nil {
			t.Fatalf("Upgrade as the only reader = %v", err)
		}
		if !errors.Is(r.Err(), lock.ErrNotHeld) {
			t.Errorf("read lease after the upgrade: Err = %v; want ErrNotHeld (released, not lost)", r.Err())
		}
		if slices.Contains(rec.kinds(), lock.EventLost) {
			t.Errorf("events %v; want no EventLost", rec.kinds())
		}
		if err := w.Unlock(ctx); err != nil {
			t.Errorf("Unlock of the upgraded lease = %v", err)
		}
	})
}

// TestUpgradeRefusedKeepsRenewing: an upgrade refused (another reader) or
// never sent (a failed dial) leaves the read lease held, and its watchdog
// renewing it past several TTLs.
func TestUpgradeRefusedKeepsRenewing(t *testing.T) {
	t.Parallel() // its own servers; mostly waiting out two TTLs
	onServerAndCluster(t, func(t *testing.T, rdb redis.UniversalClient) {
		// 1s, not 300ms: the read lease must survive the sleep below on
		// its renewals alone, on a loaded machine too.
		const ttl = time.Second
		h := &upgradeHook{renewed: make(chan struct{}, 1)}
		rdb.AddHook(redistest.Hook{Process: h.process})
		rw := lock.NewRWMutex(rdb, "upref", lock.WithTTL(ttl), lock.WithAutoExtend())
		ctx := t.Context()
		a, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Unlock(ctx)
		b, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Unlock(ctx)
		if _, err := rw.Upgrade(ctx, a); !errors.Is(err, lock.ErrUpgrade) {
			t.Fatalf("Upgrade with two readers = %v; want ErrUpgrade", err)
		}
		h.dial = true
		if _, err := rw.Upgrade(mark(ctx), a); err == nil || errors.Is(err, lock.ErrUpgrade) {
			t.Fatalf("Upgrade with a failed dial = %v; want the dial error", err)
		}
		time.Sleep(2 * ttl) // on purpose: two TTLs, which only renewals can bridge
		if err := a.Err(); err != nil {
			t.Fatalf("read lease %v after two failed upgrades and 2 TTLs; want held (renewed)", err)
		}
		if d, err := a.TTL(ctx); err != nil || d <= 0 {
			t.Errorf("read lease TTL in Redis = %v, %v; want held", d, err)
		}
	})
}

func testRWMutexUpgrade(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	rw := lock.NewRWMutex(rdb, "up")
	a, _ := rw.RLock(ctx)
	b, _ := rw.RLock(ctx)
	done := make(chan error)
	go func() {
		_, err := rw.Upgrade(ctx, a)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, lock.ErrUpgrade) {
			t.Errorf("Upgrade with two readers = %v; want ErrUpgrade", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Upgrade with another reader blocked; want an immediate ErrUpgrade")
	}
	if ttl, err := a.TTL(ctx); err != nil || ttl <= 0 {
		t.Errorf("read lease after a refused upgrade: %v, %v; want still held", ttl, err)
	}
	b.Unlock(ctx)
	w, err := rw.Upgrade(ctx, a)
	if err != nil {
		t.Fatalf("Upgrade as the only reader = %v", err)
	}
	if w.Fence() != a.Fence() || !errors.Is(a.Err(), lock.ErrNotHeld) {
		t.Errorf("upgrade: fence %d→%d, read lease Err %v", a.Fence(), w.Fence(), a.Err())
	}
	if _, ok, _ := rw.TryRLock(ctx); ok {
		t.Error("a reader got in after the upgrade")
	}
	if _, err := rw.Upgrade(ctx, w); !errors.Is(err, lock.ErrUpgrade) {
		t.Errorf("Upgrade of a write lease = %v; want ErrUpgrade", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the upgraded lease = %v", err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Unlock of the upgraded read lease = %v; want ErrNotHeld", err)
	}
}
