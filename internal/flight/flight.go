// Package flight is the cache's in-process flight group: concurrent Fetch
// calls for one key in one process share one call, as with
// golang.org/x/sync/singleflight, except that each caller may leave on its
// own context without cancelling the shared work (other processes may be
// waiting for its result), and that a write can make a flight unjoinable
// (Forget) while its callers still get its answer.
package flight

import (
	"context"
	"sync"
)

// A Kind keeps flights of one key apart whatever the key holds: keys come
// from data.
type Kind uint8

const (
	Fetch   Kind = iota // Fetch and FetchMany: they share flights
	Refresh             // Refresh: computes even over a value
	Later               // a background refresh (stale or early): nobody joins it
)

// An ID names a flight: its kind and the key's name in Redis, the name
// that writes and invalidations come with.
type ID struct {
	Kind Kind
	Key  string
}

// A Call is one flight: the work for one key shared by the concurrent
// callers of one process. R is what the flight ends with.
type Call[R any] struct {
	Result R // set before Done is closed

	// Guarded by Group.mu.
	done   chan struct{}       // made once a caller must wait; closed by End
	refs   int                 // callers waiting for done
	busy   bool                // computing: runs on even if every caller leaves
	ended  bool                // End was called; later calls do nothing
	cancel context.CancelFunc  // ends the wait of a flight nobody waits for
	tagged func([]string) bool // whether its result carries one of the tags, once computing
}

// Done is closed when the flight ends. Only a caller that joined (or a
// leader that detached) may wait on it: a lone leader's call has none.
func (cl *Call[R]) Done() <-chan struct{} { return cl.done }

// A Group holds the flights in progress. The zero value is ready to use.
type Group[R any] struct {
	mu sync.Mutex
	m  map[ID]*Call[R]

	// OnEnd, if set, is called after a flight ended (tests hold a flight
	// there, between its end and what its goroutine does next).
	OnEnd func(ID)
}

// Join returns the flight of id and whether the caller leads it: a leader
// made a new flight and must end it; a follower waits on its Done channel.
//
// heard says whether a write that returned earlier is known to have
// forgotten the flights that read before it (see Forget): with a near
// tier, whether its tracking has proven itself within its bound. If not,
// the caller leads a new flight instead, which reads after the write.
func (g *Group[R]) Join(id ID, heard bool) (cl *Call[R], lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cl := g.m[id]; cl != nil && heard {
		// A flight in the map has not ended (End removes it first, under
		// g.mu), so a done made here is closed by that End.
		if cl.done == nil {
			cl.done = make(chan struct{})
		}
		cl.refs++
		return cl, false
	}
	// No done channel yet: a hit with no company, the common case, never
	// needs one.
	cl = &Call[R]{refs: 1}
	g.put(id, cl)
	return cl, true
}

func (g *Group[R]) put(id ID, cl *Call[R]) {
	if g.m == nil {
		g.m = map[ID]*Call[R]{}
	}
	g.m[id] = cl
}

// Unheard forgets cl, which read Redis where no invalidation of a later
// write would reach this process: no caller joins it from now on.
func (g *Group[R]) Unheard(id ID, cl *Call[R]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[id] == cl {
		delete(g.m, id)
	}
}

// Detach prepares cl to run without its leader: the leader waits on Done
// like the followers, and cancel (if not nil) ends the flight's wait once
// nobody waits, at once if every caller left already (a FetchMany's callers
// may leave during its lock attempt, before the wait of a key begins).
func (g *Group[R]) Detach(cl *Call[R], cancel context.CancelFunc) {
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

// Leave records that a caller of cl gave up. A flight that nobody waits for
// any more stops waiting for other processes; one that is computing runs
// on, since other processes may be waiting for its result.
func (g *Group[R]) Leave(id ID, cl *Call[R]) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cl.refs--
	if cl.refs == 0 && !cl.busy && cl.cancel != nil {
		cl.cancel()
		if g.m[id] == cl {
			delete(g.m, id) // later callers start a fresh flight
		}
	}
}

// SetBusy marks cl as computing: it runs on when every caller has left.
// tagged, if not nil, tells whether its result carries one of some tags
// (see ForgetTagged).
func (g *Group[R]) SetBusy(cl *Call[R], tagged func([]string) bool) {
	g.mu.Lock()
	cl.busy, cl.tagged = true, tagged
	g.mu.Unlock()
}

// Start makes a flight for id unless there is one; it reports whether it
// did. Nobody joins it: it is work that runs for nobody in particular (a
// background refresh), and Start keeps a second one from running.
func (g *Group[R]) Start(id ID) (*Call[R], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m[id] != nil {
		return nil, false
	}
	cl := &Call[R]{busy: true}
	g.put(id, cl)
	return cl, true
}
