package redistest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records a Fatalf instead of ending the test, and ends the
// goroutine that called it, as testing.T's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if !Within(time.Second, func() bool { return n.Add(1) == 3 }) {
		t.Errorf("Within of a condition true at the third check = false")
	}
	start := time.Now()
	if Within(20*time.Millisecond, func() bool { return false }) {
		t.Errorf("Within of a condition never true = true")
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("Within gave up after %v; want 20 ms", d)
	}
}

func TestEventuallyFailsWithWhat(t *testing.T) {
	t.Parallel()
	Eventually(t, "a true condition", func() bool { return true })
	if testing.Short() {
		t.Skip("waits EventuallyWithin for a condition that never holds")
	}
	tb := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != tb {
				panic(r)
			}
		}()
		Eventually(tb, "the impossible", func() bool { return false })
	}()
	if want := "timed out waiting for the impossible (10s)"; tb.msg != want {
		t.Errorf("Fatalf message = %q; want %q", tb.msg, want)
	}
}
