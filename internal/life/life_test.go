package life

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

var errClosed = errors.New("closed")

// Close ends the contexts with the cause given to Init, waits for the work
// Go started, and refuses work after it.
func TestClose(t *testing.T) {
	var l Life
	l.Init(errClosed)
	dctx, stop := l.Detach(context.WithValue(context.Background(), errClosed, "v"))
	defer stop()
	started, ended := make(chan struct{}), atomic.Bool{}
	if !l.Go(func() {
		close(started)
		<-l.Context().Done()
		ended.Store(true)
	}) {
		t.Fatal("Go refused work before Close")
	}
	<-started
	if !l.Close() || l.Close() {
		t.Error("Close did not report the first call alone")
	}
	l.Wait()
	if !ended.Load() || !l.Done() {
		t.Error("Wait returned before the work ended, or Done is false after Close")
	}
	<-dctx.Done() // its AfterFunc runs on a goroutine of its own
	if err := context.Cause(dctx); !errors.Is(err, errClosed) || dctx.Value(errClosed) != "v" {
		t.Errorf("a detached context after Close: cause %v, value %v; want errClosed and the caller's value", err, dctx.Value(errClosed))
	}
	if l.Go(func() {}) || l.Run(true, func() {}) {
		t.Error("work started after Close")
	}
}

// Run with here runs f in the caller's goroutine, and Wait waits for it.
func TestRunHere(t *testing.T) {
	var l Life
	l.Init(errClosed)
	ran := false
	if !l.Run(true, func() { ran = true }) || !ran {
		t.Error("Run(true, f) did not run f before returning")
	}
	l.Close()
	l.Wait()
}
