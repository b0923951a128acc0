package dogpile

import (
	"context"
	"sync"
)

// The in-process flight group: concurrent Fetch calls for one key in one
// process share one call, as with golang.org/x/sync/singleflight, except
// that each caller may leave on its own context without cancelling the
// shared work (other processes may be waiting for its result).

// A group holds the flights in progress.
type group struct {
	mu sync.Mutex
	m  map[flightID]*call

	// onEnd, if set, is called after a flight ended (tests hold a flight
	// there, between its end and what its goroutine does next).
	onEnd func(flightID)
}

// join returns the flight of key and whether the caller leads it: a leader
// made a new flight and must end it; a follower waits on its done channel.
//
// With a near tier, heard says whether the tier's tracking has proven
// itself within MaxLag: a write that returned earlier has had its
// invalidation applied, which forgot the flights that read before it (see
// forget). Otherwise, or if the flight read on no tracked connection, a
// write may have returned since the flight read Redis and nothing would
// tell (see unheard): the caller leads a new flight instead, which reads
// after it.
func (g *group) join(key flightID, heard bool) (cl *call, lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cl := g.m[key]; cl != nil && heard {
		// A flight in the map has not ended (end removes it first, under
		// g.mu), so a done made here is closed by that end.
		if cl.done == nil {
			cl.done = make(chan struct{})
		}
		cl.refs++
		return cl, false
	}
	// No done channel yet: a hit with no company, the common case, never
	// needs one.
	cl = &call{refs: 1}
	g.m[key] = cl
	return cl, true
}

// unheard forgets cl, which reads Redis on no tracked connection: the
// near tier would hear nothing of a write after its read, so no caller
// joins it from now on (see join and forget).
func (g *group) unheard(key flightID, cl *call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[key] == cl {
		delete(g.m, key)
	}
}

// detach prepares cl to run without its leader: the leader waits on done
// like the followers, and cancel (if not nil) ends the flight's wait once
// nobody waits, at once if every caller left already (a FetchMany's callers
// may leave during its lock attempt, before the wait of a key begins).
func (g *group) detach(cl *call, cancel context.CancelFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cl.cancel = cancel
	if cl.done == nil {
		cl.done = make(chan struct{})
	}
	if cancel != nil && cl.refs == 0 && !cl.busy {
		cancel()
	}
}

// leave records that a caller of cl gave up. A flight that nobody waits for
// any more stops waiting for other processes; one that is computing runs
// on, since other processes may be waiting for its result.
func (g *group) leave(key flightID, cl *call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cl.refs--
	if cl.refs == 0 && !cl.busy && cl.cancel != nil {
		cl.cancel()
		if g.m[key] == cl {
			delete(g.m, key) // later callers start a fresh flight
		}
	}
}

// setBusy marks cl as computing, with ro, what its compute says of its
// result: it runs on when every caller has left.
func (g *group) setBusy(cl *call, ro *resultOpts) {
	g.mu.Lock()
	cl.busy, cl.ro = true, ro
	g.mu.Unlock()
}

// start makes a flight for key unless there is one; it reports whether it
// did. Nobody joins it: it is work that runs for nobody in particular (a
// background refresh), and start keeps a second one from running.
func (g *group) start(key flightID) (*call, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[key] != nil {
		return nil, false
	}
	cl := &call{busy: true}
	g.m[key] = cl
	return cl, true
}

// forget makes the flights of vk that callers may join (Fetch's and
// Refresh's) unjoinable: their read of Redis, or their compute, may
// predate a write of vk that has just returned (Set, Delete, Refresh) or
// whose invalidation has just arrived (the near tier). Later callers start
// a fresh flight, which reads after the write; the callers already in a
// forgotten flight still get its answer, as concurrent callers of a write
// may. A background refresh is not forgotten: nobody joins it, its store
// is fenced, and forgetting it would let a second one compute meanwhile.
func (g *group) forget(vk string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, flightID{fetchFlight, vk})
	delete(g.m, flightID{refreshFlight, vk})
}

// forgetTagged forgets the joinable flights whose compute gave its result
// one of tags (see Tag): an InvalidateTag of them has just returned, and
// their value, tagged before it, will not be kept (see forget).
func (g *group) forgetTagged(tags []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, cl := range g.m {
		if id.kind != laterFlight && cl.ro != nil && cl.ro.taggedWith(tags) {
			delete(g.m, id)
		}
	}
}

// forgetAll forgets the joinable flights of every key (see forget): the
// near tier lost track of what was written (FLUSHALL, tracking lost).
func (g *group) forgetAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.m {
		if id.kind != laterFlight {
			delete(g.m, id)
		}
	}
}

// endUnlessDetached ends cl with r unless it runs without its leader (see
// detach): its leader, which alone detaches it, gave up on it.
func (g *group) endUnlessDetached(key flightID, cl *call, r outcome) {
	g.mu.Lock()
	detached := cl.cancel != nil
	g.mu.Unlock()
	if !detached {
		g.end(key, cl, r)
	}
}

// end ends the flight cl with r and wakes its waiting callers. Only the
// first end counts: after a recovered panic, FetchMany ends every flight
// of its batch, some of which may be ended later by their own goroutine.
func (g *group) end(key flightID, cl *call, r outcome) {
	g.mu.Lock()
	if cl.ended {
		g.mu.Unlock()
		return
	}
	cl.ended = true
	if g.m[key] == cl {
		delete(g.m, key)
	}
	// Set under g.mu: a caller that joined has made done and reads the
	// fields after it is closed; one that left early never reads them.
	cl.outcome = r
	if cl.done != nil {
		close(cl.done)
	}
	g.mu.Unlock()
	if g.onEnd != nil {
		g.onEnd(key)
	}
}

// growStack makes room on the calling goroutine's stack for a decode, in one
// copy made while few frames are on it. A caller that waited for a flight is
// often a goroutine started for this request, whose stack begins at 2 KiB; a
// codec's decode (msgpack's reflection) needs more, and the runtime grows a
// stack by copying it and fixing up every frame on it, which deep in the
// codec's frames was the dearest work a woken waiter did (bench/HISTORY.md,
// "Figures moved out of code comments"). A stack already this deep pays only
// the zeroing of the frame, once per waiting caller, never on a hit.
//
//go:noinline
func growStack(i int) byte {
	var frame [waiterFrame]byte
	frame[i] = 1 // i is 0: a frame the compiler cannot drop
	return frame[len(frame)-1-i]
}

// waiterFrame is growStack's frame: with the frames of Fetch and a shallow
// caller below it, a stack of 2 or 4 KiB becomes 8 KiB, which msgpack's
// decode of a struct fits in (16 KiB under callers over about 3 KiB deep).
const waiterFrame = 4 << 10
