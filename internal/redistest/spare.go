package redistest

import "sync"

// Spare clusters. A fresh Redis Cluster took 2.2 s to form, nearly all
// of it a wait in Redis: a master reports cluster_state:ok only a
// cluster-node-timeout after it last owned no slots (see [Cluster.join]),
// however soon the nodes agree. A test binary that opts in with
// [WithSpareClusters] keeps one joined, never-used cluster of each shape
// in reserve: [StartClusterReplicas] takes it, so that its wait ran while
// earlier tests ran, and joins the next spare right away. A spare is as
// fresh as a cluster started on the spot: it has served no command but
// those that formed it, and holds no key.

// A TestingM is what TestMain runs: *testing.M, or the value of
// [WithSpareClusters].
type TestingM interface{ Run() int }

type withSpares struct{ m TestingM }

// WithSpareClusters turns spare clusters on for the test binary, and
// returns m, whose Run kills the spares left once the tests have run:
// call it in TestMain inside goleak's check, which would count the
// spares' goroutines as leaked.
//
//	goleak.VerifyTestMain(redistest.WithSpareClusters(m))
func WithSpareClusters(m TestingM) TestingM {
	spare.mu.Lock()
	spare.on = true
	spare.mu.Unlock()
	return withSpares{m}
}

func (w withSpares) Run() int {
	code := w.m.Run()
	spare.stop()
	return code
}

// spare is the test binary's spare clusters.
var spare spareSet

// A spareSet holds at most one idle spare cluster of each shape.
type spareSet struct {
	mu   sync.Mutex
	on   bool // WithSpareClusters was called, and the tests have not ended
	idle map[shape]*Cluster
}

// A shape is the number of masters of a cluster, and of replicas of each.
type shape struct{ masters, replicas int }

// take returns the idle spare of the shape, if there is one and all its
// nodes still run, or nil.
func (p *spareSet) take(masters, replicas int) *Cluster {
	p.mu.Lock()
	c := p.idle[shape{masters, replicas}]
	delete(p.idle, shape{masters, replicas})
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	for _, s := range c.all {
		if !s.Running() {
			discardAll(c.all)
			return nil
		}
	}
	return c
}

// fill starts and joins a spare of the shape unless one is idle or
// spares are off. A spare that fails to form is dropped: the test that
// would have taken it starts a cluster of its own, and reports that
// one's failure.
func (p *spareSet) fill(masters, replicas int) {
	key := shape{masters, replicas}
	p.mu.Lock()
	skip := !p.on || p.idle[key] != nil
	p.mu.Unlock()
	if skip {
		return
	}
	c, err := newCluster(masters, replicas)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || p.idle[key] != nil {
		discardAll(c.all)
		return
	}
	if p.idle == nil {
		p.idle = make(map[shape]*Cluster)
	}
	p.idle[key] = c
}

// stop turns spares off and kills the idle ones.
func (p *spareSet) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = false
	for key, c := range p.idle {
		discardAll(c.all)
		delete(p.idle, key)
	}
}

func discardAll(nodes []*Server) {
	for _, s := range nodes {
		s.discard()
	}
}
