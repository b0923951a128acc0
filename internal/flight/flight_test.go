package flight

import (
	"slices"
	"testing"
)

var k = ID{Fetch, "v"}

// TestJoinShares: the first caller leads; later callers join its call and
// get its result when it ends, and the key is free again after.
func TestJoinShares(t *testing.T) {
	var g Group[string]
	lead, ok := g.Join(k, true)
	if !ok {
		t.Fatal("the first caller does not lead")
	}
	follow, ok := g.Join(k, true)
	if ok || follow != lead {
		t.Fatal("the second caller leads a flight of its own")
	}
	g.End(k, lead, "done")
	<-follow.Done()
	if follow.Result != "done" || g.Len() != 0 {
		t.Fatalf("result %q, %d flights; want done, 0", follow.Result, g.Len())
	}
	g.End(k, lead, "again") // only the first End counts
	if lead.Result != "done" {
		t.Fatalf("a second End changed the result to %q", lead.Result)
	}
}

// TestUnheardLeads: a caller that cannot be sure a write was heard leads
// a new flight instead of joining.
func TestUnheardLeads(t *testing.T) {
	var g Group[int]
	first, _ := g.Join(k, true)
	if second, lead := g.Join(k, false); !lead || second == first {
		t.Fatal("a caller that has not heard joined a flight")
	}
}

// TestForget: a forgotten flight keeps its callers but takes no more; a
// background refresh is never forgotten, and a second one cannot start.
func TestForget(t *testing.T) {
	var g Group[int]
	old, _ := g.Join(k, true)
	later := ID{Later, "v"}
	bg, ok := g.Start(later)
	if !ok {
		t.Fatal("a background flight did not start")
	}
	if _, ok := g.Start(later); ok {
		t.Fatal("a second background flight started")
	}
	g.Forget("v")
	if cl, lead := g.Join(k, true); !lead || cl == old {
		t.Fatal("a caller joined a forgotten flight")
	}
	if g.Waiting(later) != 0 {
		t.Fatal("Forget dropped the background flight")
	}
	g.ForgetAll()
	if g.Waiting(later) != 0 || g.Waiting(k) != -1 {
		t.Fatal("ForgetAll dropped the background flight or kept a joinable one")
	}
	g.End(later, bg, 0)
}

// TestForgetTagged: only the flights whose result carries a tag go.
func TestForgetTagged(t *testing.T) {
	var g Group[int]
	a, b := ID{Fetch, "a"}, ID{Fetch, "b"}
	ca, _ := g.Join(a, true)
	cb, _ := g.Join(b, true)
	g.SetBusy(ca, func(tags []string) bool { return slices.Contains(tags, "t") })
	g.SetBusy(cb, nil)
	g.ForgetTagged([]string{"t"})
	if g.Waiting(a) != -1 || g.Waiting(b) != 1 {
		t.Fatalf("after ForgetTagged: a %d, b %d waiting; want gone, 1", g.Waiting(a), g.Waiting(b))
	}
}

// TestLeaveCancels: a detached flight nobody waits for is cancelled when
// its last caller leaves, unless it computes.
func TestLeaveCancels(t *testing.T) {
	var g Group[int]
	cl, _ := g.Join(k, true)
	cancelled := false
	g.Detach(cl, func() { cancelled = true })
	g.Leave(k, cl)
	if !cancelled || g.Len() != 0 {
		t.Fatalf("cancelled %v, %d flights; want true, 0", cancelled, g.Len())
	}

	busy, _ := g.Join(k, true)
	cancelled = false
	g.SetBusy(busy, nil)
	g.Detach(busy, func() { cancelled = true })
	g.Leave(k, busy)
	if cancelled {
		t.Fatal("a computing flight was cancelled when its caller left")
	}
	g.EndUnlessDetached(k, busy, 1)
	if busy.Result == 1 {
		t.Fatal("EndUnlessDetached ended a detached flight")
	}
	g.End(k, busy, 2)
	<-busy.Done()
}
