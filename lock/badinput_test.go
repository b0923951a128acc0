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

// Bad input: a programmer error panics; a name or TTL that may come from
// data returns ErrInvalid and touches nothing.

func TestBadInput(t *testing.T) {
	rdb := redistest.Start(t)
	// Programmer errors panic, and say so; an option's names the option.
	for name, f := range map[string]func(){
		"nil client":         func() { lock.NewMutex(nil, "x") },
		"WithTTL(0s)":        func() { lock.WithTTL(0) },
		"WithTTL(999µs)":     func() { lock.WithTTL(999 * time.Microsecond) },
		"WithBackoff(1s, ":   func() { lock.WithBackoff(time.Second, time.Millisecond) },
		"WithMaxHold(-1ns)":  func() { lock.WithMaxHold(-1) },
		"WithRetention(0s)":  func() { lock.WithRetention(0) },
		"WithWaitTimeout(-1": func() { lock.WithWaitTimeout(-time.Second) },
		"nil Do fn":          func() { lock.Do(t.Context(), rdb, "x", nil) },
		"zero permits":       func() { lock.NewSemaphore(rdb, "x", 0) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				s, ok := r.(string)
				if !ok || !strings.HasPrefix(s, "lock: ") || !strings.HasSuffix(s, "(a programmer error)") {
					t.Errorf("panic = %v; want a \"lock: ... (a programmer error)\" message", r)
				}
				if strings.HasPrefix(name, "With") && !strings.Contains(s, name) {
					t.Errorf("panic = %q; want it to name the option, %s...", s, name)
				}
			}()
			f()
		})
	}
	// Names and TTLs that may come from data are errors, never panics, and
	// touch nothing in Redis.
	rdb.FlushAll(t.Context())
	ctx := t.Context()
	for name, f := range map[string]func() error{
		"mutex Lock":       func() error { _, err := lock.NewMutex(rdb, "").Lock(ctx); return err },
		"mutex TryLock":    func() error { _, _, err := lock.NewMutex(rdb, "").TryLock(ctx); return err },
		"mutex Locked":     func() error { _, err := lock.NewMutex(rdb, "").Locked(ctx); return err },
		"fair mutex Lock":  func() error { _, err := lock.NewMutex(rdb, "", lock.WithFair()).Lock(ctx); return err },
		"Do":               func() error { return lock.Do(ctx, rdb, "", func(context.Context, *lock.Lease) error { return nil }) },
		"semaphore":        func() error { _, err := lock.NewSemaphore(rdb, "", 2).Acquire(ctx, 1); return err },
		"semaphore try":    func() error { _, _, err := lock.NewSemaphore(rdb, "", 2).TryAcquire(ctx, 1); return err },
		"semaphore avail":  func() error { _, err := lock.NewSemaphore(rdb, "", 2).Available(ctx); return err },
		"rw RLock":         func() error { _, err := lock.NewRWMutex(rdb, "").RLock(ctx); return err },
		"rw TryRLock":      func() error { _, _, err := lock.NewRWMutex(rdb, "").TryRLock(ctx); return err },
		"rw Lock":          func() error { _, err := lock.NewRWMutex(rdb, "").Lock(ctx); return err },
		"rw TryLock":       func() error { _, _, err := lock.NewRWMutex(rdb, "").TryLock(ctx); return err },
		"rw Locked":        func() error { _, err := lock.NewRWMutex(rdb, "").Locked(ctx); return err },
		"multi no names":   func() error { _, err := lock.NewMultiMutex(rdb, nil).Lock(ctx); return err },
		"multi empty name": func() error { _, _, err := lock.NewMultiMutex(rdb, []string{"a", ""}).TryLock(ctx); return err },
		"redlock":          func() error { _, err := lock.NewRedlock([]redis.UniversalClient{rdb}, "").Lock(ctx); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := f()
			if !errors.Is(err, lock.ErrInvalid) {
				t.Fatalf("err = %v; want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), "name") && !strings.Contains(err.Error(), "TTL") {
				t.Errorf("err = %q; want it to name the argument", err)
			}
		})
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys left by invalid calls; want 0", n)
	}
	l, _, err := lock.NewMutex(rdb, "x").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, 999*time.Microsecond); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Extend(999µs) = %v; want ErrInvalid", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Errorf("Unlock after a refused Extend = %v; the lease must be intact", err)
	}
	// Odd names are fine: braces must not split a lock across slots.
	for _, name := range []string{"}", "{", "a{b}c", " ", "ünïcode"} {
		l, ok, err := lock.NewMutex(rdb, name).TryLock(t.Context())
		if !ok || err != nil {
			t.Errorf("TryLock(%q) = %v, %v", name, ok, err)
		}
		l.Unlock(t.Context())
	}
	// A cancelled context fails fast and leaves nothing behind.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := lock.NewMutex(rdb, "x").Lock(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("Lock(cancelled) = %v; want ErrNotObtained and context.Canceled", err)
	}
	if n := rdb.Exists(t.Context(), "dogpile:mutex:{x}").Val(); n != 0 {
		t.Errorf("cancelled Lock left the lock key behind")
	}
}
