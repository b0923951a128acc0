package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestForeignDataAtLockKey: another program overwrites a lock's key with
// a string. The holder's Unlock, Extend and TTL say ErrNotHeld, not Redis's
// raw WRONGTYPE; its watchdog reports the lease lost; and
// an acquire gives a clear error naming the key at once instead of waiting.
func TestForeignDataAtLockKey(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	for _, p := range primitives(rdb, "alien", lock.WithTTL(time.Minute)) {
		t.Run(p.name, func(t *testing.T) {
			l, err := p.lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rdb.Set(ctx, p.key, "not a lock", 0)
			defer rdb.Del(ctx, p.key)
			if err := l.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Extend = %v; want ErrNotHeld", err)
			}
			if _, err := l.TTL(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("TTL = %v; want ErrNotHeld", err)
			}
			if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Unlock = %v; want ErrNotHeld", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := p.lock(wctx); err == nil || errors.Is(err, lock.ErrNotObtained) || !strings.Contains(err.Error(), p.key) {
				t.Errorf("Lock on foreign data = %v; want at once an error naming %s", err, p.key)
			}
		})
	}

	m := lock.NewMutex(rdb, "alien-watched", lock.WithTTL(90*time.Millisecond), lock.WithAutoExtend())
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "dogpile:mutex:{alien-watched}", "not a lock", 0)
	select {
	case <-l.Done():
		if !errors.Is(l.Err(), lock.ErrLost) {
			t.Errorf("Err = %v; want ErrLost", l.Err())
		}
	case <-time.After(5 * time.Second):
		t.Error("watchdog kept a lease whose key another program overwrote")
	}
	l.Unlock(ctx)
}

// TestRedlockForeignDataIsNoDeadServer: foreign data on one server of five
// makes the lock busy there, not the server dead: the lock is still granted
// by the other four, and released without error. On three of five, no
// majority can ever be had: acquiring says so, naming the key.
func TestRedlockForeignDataIsNoDeadServer(t *testing.T) {
	srvs, clients := startRedlock(t)
	key := "dogpile:redlock:{alien}"
	srvs[0].Client(t).Set(t.Context(), key, "not a lock", 0)
	rl := lock.NewRedlock(clients(), "alien", lock.WithTTL(time.Minute))
	l, err := rl.Lock(t.Context())
	if err != nil {
		t.Fatalf("Lock with foreign data on 1 of 5 = %v; want the lock", err)
	}
	if err := l.Extend(t.Context(), time.Minute); err != nil {
		t.Errorf("Extend = %v; want nil", err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Errorf("Unlock = %v; want nil", err)
	}
	// Unlock returns once a majority released, giving the rest only a few
	// ms more: on a loaded machine a server may still hold our lock, and
	// answer the TryLock below "busy" rather than a third "foreign".
	var rest []*redis.Client
	for _, s := range srvs[1:] {
		rest = append(rest, s.Client(t))
	}
	redistest.Eventually(t, "the lock released on every server", func() bool {
		for _, c := range rest {
			if c.Exists(t.Context(), key).Val() != 0 {
				return false
			}
		}
		return true
	})
	for _, s := range srvs[1:3] {
		s.Client(t).Set(t.Context(), key, "not a lock", 0)
	}
	l, ok, err := rl.TryLock(t.Context())
	if ok || err == nil || !strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "servers failed") {
		t.Errorf("TryLock with foreign data on 3 of 5 = %v, %v, %v; want an error naming %s, no dead servers", l, ok, err, key)
	}
}

// TestForeignDataAtFenceCounter: another program writes a hash where a
// lock's fencing counter lives. An acquire fails at once with an error, and
// leaves no lock behind: the fence is drawn before the lock is set (with
// the lock set first, the lock stayed taken for a whole TTL).
func TestForeignDataAtFenceCounter(t *testing.T) {
	rdb := redistest.Start(t)
	ctx := t.Context()
	counter := func(kind, name string) string { return "dogpile:" + kind + ":{" + name + "}:fence" }
	for _, c := range []struct {
		name, key, lockKey string
		lock               func(ctx context.Context) (*lock.Lease, error)
	}{
		{"Mutex", counter("mutex", "alien-fence"), "dogpile:mutex:{alien-fence}",
			lock.NewMutex(rdb, "alien-fence", lock.WithTTL(time.Minute)).Lock},
		{"MultiMutex", counter("mutex", "alien-multi2"), "dogpile:mutex:{alien-multi1}",
			lock.NewMultiMutex(rdb, []string{"alien-multi1", "alien-multi2"}, lock.WithTTL(time.Minute)).Lock},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb.HSet(ctx, c.key, "not", "a counter")
			defer rdb.Del(ctx, c.key)
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := c.lock(wctx); err == nil || errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("Lock = %v; want an error at once", err)
			}
			lock.WaitRollbacks()
			if n := rdb.Exists(ctx, c.lockKey).Val(); n != 0 {
				t.Errorf("%s exists after the failed acquire; want nothing left behind", c.lockKey)
			}
		})
	}
}
