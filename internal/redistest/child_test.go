package redistest

import (
	"strings"
	"testing"
	"time"
)

// The dispatch that other packages put first in TestMain sits here, in
// init, so that this file holds the harness's whole test.
func init() { ChildMain(testModes) }

var testModes = map[string]func(*Parent){
	// add: ready, then the parent's go; the result is its params plus one.
	"add": func(p *Parent) {
		var n int
		p.Params(&n)
		p.Ready()
		p.Result(n + 1)
	},
	// double answers each value with its double, until a 0.
	"double": func(p *Parent) {
		for n := 1; n != 0 && p.Receive(&n); {
			p.Result(2 * n)
		}
	},
	// pong answers each line with pong.
	"pong": func(p *Parent) {
		for p.Scan() {
			p.Say("pong")
		}
	},
	"fail": func(p *Parent) { p.Fatalf("boom %d", 7) },
}

// fails runs f with a tb whose Fatalf ends f, and returns the message
// (empty if f did not fail).
func fails(t *testing.T, f func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != tb {
				panic(r)
			}
		}()
		f(tb)
	}()
	return tb.msg
}

func TestChildrenReadyGoResult(t *testing.T) {
	t.Parallel()
	kids := StartChildren(t, 3, "add", 41)
	for _, k := range kids {
		k.Go(t)
	}
	for i, k := range kids {
		var got int
		k.Result(t, &got)
		k.Wait(t)
		if got != 42 {
			t.Errorf("child %d: result %d; want 42", i, got)
		}
	}
}

func TestChildRounds(t *testing.T) {
	t.Parallel()
	c := StartChild(t, "double", nil)
	for _, n := range []int{21, 5} {
		c.Send(t, n)
		var got int
		c.Result(t, &got)
		if got != 2*n {
			t.Errorf("round %d: result %d; want %d", n, got, 2*n)
		}
	}
	c.Send(t, 0)
	c.Wait(t)
}

func TestChildFailureQuotesStderr(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string]string{
		"fail":      "child fail: boom 7",
		"no-such":   "child no-such: no such mode",
		"add-typo!": "no such mode",
	} {
		c := StartChild(t, mode, nil)
		msg := fails(t, func(tb testing.TB) { c.Result(tb, new(int)) })
		if !strings.Contains(msg, "exit status 1") || !strings.Contains(msg, want) {
			t.Errorf("mode %s: Result failed with %q; want the exit status and %q", mode, msg, want)
		}
	}
}

func TestChildTimeout(t *testing.T) {
	t.Parallel()
	c := StartChild(t, "pong", nil)
	c.SetTimeout(50 * time.Millisecond)
	msg := fails(t, func(tb testing.TB) { c.Expect(tb, "ready") })
	if want := `did not say "ready" within 50ms`; !strings.Contains(msg, want) {
		t.Errorf("Expect failed with %q; want %q", msg, want)
	}
}

func TestChildPauseResume(t *testing.T) {
	t.Parallel()
	c := StartChild(t, "pong", nil)
	c.Say(t, "ping")
	c.Expect(t, "pong") // started and answering
	c.Pause(t)
	c.Say(t, "ping")
	c.SetTimeout(200 * time.Millisecond)
	if msg := fails(t, func(tb testing.TB) { c.Expect(tb, "pong") }); msg == "" {
		t.Fatal("a paused child answered")
	}
	c.Resume(t)
	c.SetTimeout(ChildTimeout)
	c.Expect(t, "pong")
}

func TestChildKill(t *testing.T) {
	t.Parallel()
	c := StartChild(t, "pong", nil)
	c.Kill()
	msg := fails(t, func(tb testing.TB) { c.Wait(tb) })
	if want := "exited (signal: killed)"; !strings.Contains(msg, want) {
		t.Errorf("Wait after Kill failed with %q; want %q", msg, want)
	}
}
