package benchmarks

// The processes of the multi-process benchmarks: this test binary
// re-executed through redistest's child harness, one process per child,
// each driven by rounds of JSON values.

import (
	"testing"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestMain(m *testing.M) {
	redistest.ChildMain(map[string]func(*redistest.Parent){
		"stampede": stampedeChild,
		"rolling":  rollingChild,
		"storelag": storeLagChild,
		"manymiss": manyMissChild,
		"mutex":    mutexChild,
	})
	m.Run()
}

// A procSpec is what a child of a round-driven benchmark is told: the
// Redis at Addr, and the library Lib for the scenarios that compare them.
type procSpec struct{ Addr, Lib string }

// startChildren starts n children in mode with spec; they answer the
// rounds of exchange until b's cleanup kills them.
func startChildren(b *testing.B, n int, mode string, spec procSpec) []*redistest.Child {
	b.Helper()
	children := make([]*redistest.Child, n)
	for i := range children {
		children[i] = redistest.StartChild(b, mode, spec)
	}
	return children
}

// exchange sends round to every child and returns their answers, in the
// children's order.
func exchange[R any](b *testing.B, children []*redistest.Child, round any) []R {
	b.Helper()
	for _, c := range children {
		c.Send(b, round)
	}
	res := make([]R, len(children))
	for i, c := range children {
		c.Result(b, &res[i])
	}
	return res
}

// serveRounds is the child's side of exchange: it answers each round the
// parent sends with do's result.
func serveRounds[Q, R any](p *redistest.Parent, do func(Q) R) {
	for {
		var q Q
		if !p.Receive(&q) {
			return // the parent closed stdin
		}
		p.Result(do(q))
	}
}
