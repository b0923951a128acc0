package flight

// Forget makes the flights of key that callers may join (Fetch's and
// Refresh's) unjoinable: their read of Redis, or their compute, may
// predate a write of key that has just returned (Set, Delete, Refresh) or
// whose invalidation has just arrived (the near tier). Later callers start
// a fresh flight, which reads after the write; the callers already in a
// forgotten flight still get its answer, as concurrent callers of a write
// may. A background refresh is not forgotten: nobody joins it, its store
// is fenced, and forgetting it would let a second one compute meanwhile.
func (g *Group[R]) Forget(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.m, ID{Fetch, key})
	delete(g.m, ID{Refresh, key})
}

// ForgetTagged forgets the joinable flights whose result carries one of
// tags: an invalidation of them has just returned (see Forget).
func (g *Group[R]) ForgetTagged(tags []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, cl := range g.m {
		if id.Kind != Later && cl.tagged != nil && cl.tagged(tags) {
			delete(g.m, id)
		}
	}
}

// ForgetAll forgets the joinable flights of every key (see Forget): the
// near tier lost track of what was written (FLUSHALL, tracking lost).
func (g *Group[R]) ForgetAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id := range g.m {
		if id.Kind != Later {
			delete(g.m, id)
		}
	}
}

// EndUnlessDetached ends cl with r unless it runs without its leader (see
// Detach): its leader, which alone detaches it, gave up on it.
func (g *Group[R]) EndUnlessDetached(id ID, cl *Call[R], r R) {
	g.mu.Lock()
	detached := cl.cancel != nil
	g.mu.Unlock()
	if !detached {
		g.End(id, cl, r)
	}
}

// End ends the flight cl with r and wakes its waiting callers. Only the
// first End counts: after a recovered panic, FetchMany ends every flight
// of its batch, some of which may be ended later by their own goroutine.
func (g *Group[R]) End(id ID, cl *Call[R], r R) {
	g.mu.Lock()
	if cl.ended {
		g.mu.Unlock()
		return
	}
	cl.ended = true
	if g.m[id] == cl {
		delete(g.m, id)
	}
	// Set under g.mu: a caller that joined has made done and reads the
	// result after it is closed; one that left early never reads it.
	cl.Result = r
	if cl.done != nil {
		close(cl.done)
	}
	g.mu.Unlock()
	if g.OnEnd != nil {
		g.OnEnd(id)
	}
}

// Len is how many flights are in progress.
func (g *Group[R]) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.m)
}

// Waiting is how many callers wait for the flight of id, or -1 if there is
// none.
func (g *Group[R]) Waiting(id ID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cl := g.m[id]; cl != nil {
		return cl.refs
	}
	return -1
}
