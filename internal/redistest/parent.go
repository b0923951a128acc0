package redistest

// parent.go is the child's side of child.go: the test binary, re-executed
// by StartChild, runs one mode and talks to its parent.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
)

// A Parent is a child process's link to the test that started it: the
// parameters it was given, the lines the parent writes to its stdin, and
// its own lines to the parent on stdout.
//
// Say, Result and Fatalf are safe for concurrent use; Scan, Text and
// Receive are not.
type Parent struct {
	mode   string
	params string
	in     *bufio.Reader
	line   string

	mu  sync.Mutex // serializes the lines on out
	out *bufio.Writer
}

// ChildMain returns at once unless this process is a child started by
// [StartChild]. In a child, it runs the mode that StartChild named, which
// must be in modes, and exits: with status 0 when the mode returns, 1
// when it calls [Parent.Fatalf]. Call it first in TestMain, so that no
// test runs in a child:
//
//	func TestMain(m *testing.M) {
//		redistest.ChildMain(map[string]func(*redistest.Parent){"holder": holder})
//		goleak.VerifyTestMain(m)
//	}
func ChildMain(modes map[string]func(p *Parent)) {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	mode, params, _ := strings.Cut(spec, " ")
	p := &Parent{mode: mode, params: params, in: bufio.NewReader(os.Stdin), out: bufio.NewWriter(os.Stdout)}
	run := modes[mode]
	if run == nil {
		p.Fatalf("no such mode")
	}
	run(p)
	os.Exit(0)
}

// Params decodes the child's parameters, StartChild's params, into v.
func (p *Parent) Params(v any) {
	if err := json.Unmarshal([]byte(p.params), v); err != nil {
		p.Fatalf("params %s: %v", p.params, err)
	}
}

// Say writes line to the parent, for [Child.Expect].
func (p *Parent) Say(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out.WriteString(line + "\n")
	p.out.Flush()
}

// Ready tells the parent that the child is ready, and waits until the
// parent says go ([Child.Go]): the children's work then overlaps.
func (p *Parent) Ready() {
	p.Say("ready")
	if !p.Scan() || p.Text() != "go" {
		p.Fatalf("got %q from the parent; want go", p.Text())
	}
}

// Scan waits for the parent's next line ([Child.Say]), which Text then
// returns. It reports false when the parent closed the child's stdin.
func (p *Parent) Scan() bool {
	line, err := p.in.ReadString('\n')
	p.line = strings.TrimSuffix(line, "\n")
	return err == nil
}

// Text returns the line read by the last call to Scan.
func (p *Parent) Text() string { return p.line }

// Receive waits for the parent's next value ([Child.Send]) and decodes it
// into v. It reports false when the parent closed the child's stdin.
func (p *Parent) Receive(v any) bool {
	if !p.Scan() {
		return false
	}
	if err := json.Unmarshal([]byte(p.line), v); err != nil {
		p.Fatalf("from the parent %q: %v", p.line, err)
	}
	return true
}

// Result sends v, encoded as JSON, to the parent ([Child.Result]).
func (p *Parent) Result(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		p.Fatalf("result: %v", err)
	}
	p.Say("result " + string(b))
}

// Fatalf writes the message to stderr, which the parent quotes when it
// fails, and exits with status 1.
func (p *Parent) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "child %s: %s\n", p.mode, fmt.Sprintf(format, args...))
	os.Exit(1)
}
