package lock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// checkLocked fails t unless locked reports want.
func checkLocked(t *testing.T, what string, locked func() (bool, error), want bool) {
	t.Helper()
	got, err := locked()
	if err != nil || got != want {
		t.Errorf("Locked %s = %v, %v; want %v", what, got, err, want)
	}
}

// checkFreed fails t unless locked comes to report false: a lease whose
// Done has closed (its safe deadline) leaves Redis a little later, when
// its key expires.
func checkFreed(t *testing.T, what string, locked func() (bool, error)) {
	t.Helper()
	var held bool
	var err error
	if !redistest.Within(redistest.EventuallyWithin, func() bool { held, err = locked(); return err == nil && !held }) {
		t.Errorf("Locked %s = %v, %v after %v; want false", what, held, err, redistest.EventuallyWithin)
	}
}

// testMutexLocked: Locked sees plain and fair holders of the name, and
// not a holder whose lease expired.
func testMutexLocked(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	m := lock.NewMutex(rdb, "state")
	locked := func() (bool, error) { return m.Locked(ctx) }
	checkLocked(t, "before any Lock", locked, false)
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkLocked(t, "while held", locked, true)
	l.Unlock(ctx)
	checkLocked(t, "after Unlock", locked, false)

	fair, err := lock.NewMutex(rdb, "state", lock.WithFair()).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkLocked(t, "while a fair holder holds it", locked, true)
	fair.Unlock(ctx)
	checkLocked(t, "after the fair holder's Unlock", locked, false)

	short, _, _ := lock.NewMutex(rdb, "state", lock.WithTTL(30*time.Millisecond)).TryLock(ctx)
	fshort, err := lock.NewMutex(rdb, "state-f", lock.WithFair(), lock.WithTTL(30*time.Millisecond)).Lock(ctx)
	if short == nil || err != nil {
		t.Fatal(short, err)
	}
	<-short.Done()
	<-fshort.Done()
	for _, name := range []string{"state", "state-f"} {
		mm := lock.NewMutex(rdb, name)
		checkFreed(t, name+" after the holder's lease expired", func() (bool, error) { return mm.Locked(ctx) })
	}
}

// testRWMutexLocked: Locked sees a writer or any live reader.
func testRWMutexLocked(t *testing.T, rdb redis.UniversalClient) {
	ctx := t.Context()
	rw := lock.NewRWMutex(rdb, "state")
	locked := func() (bool, error) { return rw.Locked(ctx) }
	checkLocked(t, "before any lock", locked, false)
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx)
	checkLocked(t, "with two readers", locked, true)
	r1.Unlock(ctx)
	checkLocked(t, "with one reader", locked, true)
	r2.Unlock(ctx)
	checkLocked(t, "after the readers left", locked, false)
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkLocked(t, "with a writer", locked, true)
	w.Unlock(ctx)
	checkLocked(t, "after the writer left", locked, false)

	r, err := lock.NewRWMutex(rdb, "state", lock.WithTTL(30*time.Millisecond)).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	checkFreed(t, "after the reader's lease expired", locked)
}
