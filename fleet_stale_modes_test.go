package dogpile_test

// The modes of the children of fleet_stale_test.go (see fleet_child_test.go).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// procBurst: every worker fetches the stale "k" once and must get v1 at
// once; the refresh (v2) is held until the parent sets "release", after
// every child said "served".
func procBurst(p *proc) {
	p.ready()
	compute := func(ctx context.Context) (string, error) {
		p.count("computes")
		released := func() bool { return p.rdb.Exists(ctx, p.prefix+"release").Val() == 1 }
		if !redistest.Within(redistest.ChildTimeout, released) { // as long as the parent waits for a line
			p.fail("the parent did not release the refresh within " + redistest.ChildTimeout.String())
		}
		return "v2", nil
	}
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			v, err := p.c.Fetch(context.Background(), "k", time.Minute, compute)
			p.check(v, "v1", err)
		})
	}
	wg.Wait()
	p.say("served")
}

// procFailing: workers fetch "k" (stale v1) in a loop while every compute
// fails, until the first error: the miss once the stale window ended. A
// compute that finds the value there is a refresh, and records its start
// time in the list "refreshes".
func procFailing(p *proc) {
	p.ready()
	errDB := errors.New("db down")
	compute := func(ctx context.Context) (string, error) {
		if p.rdb.Exists(ctx, dogpile.KeysOf(p.c, "k").Value).Val() == 1 {
			p.rdb.RPush(ctx, p.prefix+"refreshes", time.Now().UnixMilli())
		} else {
			p.count("misscomputes")
		}
		return "", errDB
	}
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				v, err := p.c.Fetch(context.Background(), "k", 200*time.Millisecond, compute)
				end := time.Now().UnixMilli()
				if err == nil {
					p.check(v, "v1", nil)
					continue
				}
				p.mu.Lock()
				p.res.Misses++
				if p.res.FirstErr == 0 || end < p.res.FirstErr {
					p.res.FirstErr = end
				}
				p.mu.Unlock()
				return
			}
			p.fail("no miss within 20s")
		})
	}
	wg.Wait()
}

// procHold computes once and holds the compute until the parent writes a
// line, then returns "held". p.op says how the compute starts: "stale"
// (a Fetch of the stale "k", refreshed in the background), "fetch" (a Fetch
// of the absent "k") or "refresh" (Refresh).
func procHold(p *proc) {
	p.ready()
	compute := func(ctx context.Context) (string, error) {
		p.count("computes")
		p.say("computing")
		p.in.Scan() // SIGSTOP and SIGCONT may come meanwhile
		return "held", nil
	}
	ctx := context.Background()
	switch op := p.op; op {
	case "stale":
		v, err := p.c.Fetch(ctx, "k", time.Minute, compute)
		p.check(v, "v1", err)
	case "fetch":
		v, err := p.c.Fetch(ctx, "k", time.Minute, compute)
		p.check(v, "held", err)
	case "refresh":
		v, err := p.c.Refresh(ctx, "k", time.Minute, compute)
		p.check(v, "held", err)
	default:
		p.fail("unknown op " + op)
	}
}

// procUntil: workers fetch the stale "k" (v1) in a loop until they are
// served the refreshed v2, which the first refresh of this process stores.
func procUntil(p *proc) {
	p.ready()
	compute := func(ctx context.Context) (string, error) {
		p.count("computes")
		return "v2", nil
	}
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				v, err := p.c.Fetch(context.Background(), "k", time.Minute, compute)
				if err == nil && v == "v2" {
					now := time.Now().UnixMilli()
					p.mu.Lock()
					if p.res.FirstNew == 0 || now < p.res.FirstNew {
						p.res.FirstNew = now
					}
					p.mu.Unlock()
					return
				}
				if !p.check(v, "v1", err) {
					return
				}
			}
			p.fail("not served the refreshed value within 15s")
		})
	}
	wg.Wait()
}

// procAbsent: every worker fetches "k", which does not exist: compute
// reports ErrNotFound after 100ms, and every caller must get ErrNotFound.
func procAbsent(p *proc) {
	p.ready()
	compute := func(ctx context.Context) (string, error) {
		p.count("computes")
		time.Sleep(100 * time.Millisecond)
		return "", fmt.Errorf("no such beer: %w", dogpile.ErrNotFound)
	}
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			v, err := p.c.Fetch(context.Background(), "k", time.Minute, compute)
			if errors.Is(err, dogpile.ErrNotFound) && !errors.Is(err, dogpile.ErrComputeFailed) {
				p.check("", "", nil)
				return
			}
			p.fail(fmt.Sprintf("got %q, %v; want ErrNotFound", v, err))
		})
	}
	wg.Wait()
}

// procRefresh: every worker calls Refresh of "k" while another process
// computes it (see procHold): they must get its value, "held". The child
// says "waiting" once every worker joined the process's Refresh flight and
// it waits for the other process: a Refresh called after that compute
// ended would rightly compute again.
func procRefresh(p *proc) {
	dogpile.OnWait(p.c, nil)
	p.ready()
	compute := func(ctx context.Context) (string, error) {
		p.count("computes")
		return "second", nil
	}
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			v, err := p.c.Refresh(context.Background(), "k", time.Minute, compute)
			p.check(v, "held", err)
		})
	}
	waiting := func() bool { return dogpile.RefreshCallers(p.c, "k") == p.workers && p.c.Stats().Waits > 0 }
	if !redistest.Within(redistest.ChildTimeout, waiting) {
		p.fail("the workers did not join one Refresh flight waiting for the other process")
	}
	p.say("waiting")
	wg.Wait()
}

// procXFetch: a first fill, then workers fetch the hot "k" every 2ms for
// p.run. compute takes xfetchCompute and counts itself, and the computes
// running at once ("active"): "overlaps" counts computes that started while
// another ran.
func procXFetch(p *proc) {
	run := p.run
	bg := context.Background()
	compute := func(context.Context) (string, error) {
		p.count("computes")
		if p.count("active") > 1 {
			p.count("overlaps")
		}
		time.Sleep(xfetchCompute)
		p.rdb.Decr(bg, p.prefix+"active")
		return "v", nil
	}
	dogpile.OnWait(p.c, nil) // one child waits for the first fill
	p.ready()
	v, err := p.c.Fetch(bg, "k", xfetchTTL, compute)
	p.check(v, "v", err)
	p.say("filled")
	p.in.Scan() // both children filled: the load starts together
	before := p.c.Stats()
	var wg sync.WaitGroup
	end := time.Now().Add(run)
	for range p.workers {
		wg.Go(func() { p.load(end, compute) })
	}
	wg.Go(func() { p.probe(end) })
	wg.Wait()
	p.res.Load = statsSince(p.c.Stats(), before)
}

const xfetchTTL, xfetchCompute = 300 * time.Millisecond, 30 * time.Millisecond

// load fetches "k" every 2ms until end: a steady load that does not starve
// the machine (and the refresh) of CPU.
func (p *proc) load(end time.Time, compute func(context.Context) (string, error)) {
	for time.Now().Before(end) {
		start := time.Now()
		v, err := p.c.Fetch(context.Background(), "k", xfetchTTL, compute)
		d := time.Since(start)
		p.mu.Lock()
		p.res.Calls++
		p.res.Max = max(p.res.Max, d)
		if d > xfetchCompute/2 {
			p.res.Slow++
		}
		p.mu.Unlock()
		if v != "v" || err != nil {
			p.fail(fmt.Sprintf("got %q, %v; want v", v, err))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// probe measures, until end, the longest stall of this process or of the
// key's Redis node: how much longer than 5ms a 5ms sleep and a round trip
// to the key's slot took. A refresh delayed by a stall longer than its
// slack (about one compute) comes late through no fault of the cache.
func (p *proc) probe(end time.Time) {
	lock := dogpile.KeysOf(p.c, "k").Lock
	for time.Now().Before(end) {
		start := time.Now()
		time.Sleep(5 * time.Millisecond)
		p.rdb.Exists(context.Background(), lock)
		d := time.Since(start) - 5*time.Millisecond
		p.mu.Lock()
		p.res.Stall = max(p.res.Stall, d)
		p.mu.Unlock()
	}
}

// statsSince returns the counts of s made after before.
func statsSince(s, before dogpile.Stats) dogpile.Stats {
	return dogpile.Stats{
		Hits: s.Hits - before.Hits, Misses: s.Misses - before.Misses, Computes: s.Computes - before.Computes,
		Waits: s.Waits - before.Waits, Stale: s.Stale - before.Stale, Refreshes: s.Refreshes - before.Refreshes,
		Shared: s.Shared - before.Shared,
	}
}
