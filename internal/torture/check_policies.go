package torture

// check_policies.go holds the rules on the freshness policies: what
// Previous hands a compute (previous), how long a stored value can be
// read (expiry), and when the near tier's kept copies are served
// (stale-if-down).

import (
	"fmt"
	"time"
)

// DownBound is how long after a fault that cut a process off from Redis
// healed its circuit may still be open, so that WithStaleIfDown serves a
// kept copy: the breaker's cooldown (100 ms) and the probe that closes it,
// with room for a loaded machine.
const DownBound = 2 * time.Second

// down: faults during which a process may find Redis unreachable and its
// circuit open: a server stopped or killed, a failover's wait, replies
// lost or late, the process itself stopped past its calls' deadlines.
var down = []string{FPause, FRestart, FKillMaster, FSplitBrain, FFailover, FDrop, FDelay, FPauseProc}

// checkPrevious: the value Previous hands a compute is one the Cache
// stored for that key, drawn before the compute began: never another
// key's, never one nobody drew, never one from the future.
func (c *checker) checkPrevious() {
	for _, op := range c.h.Ops {
		if op.Kind != KCompute || op.Prev == 0 {
			continue
		}
		c.checked["previous"]++
		k := op.Keys[0]
		b := c.births[op.Prev]
		switch {
		case b == nil:
			c.violate("previous", fmt.Sprintf("%s: Previous gave version %d, which nobody drew", ckey{op.Cfg, k}, op.Prev), op)
		case b.Cfg != op.Cfg || b.Vers[k] != op.Prev:
			c.violate("previous", fmt.Sprintf("%s: Previous gave version %d, drawn for another key", ckey{op.Cfg, k}, op.Prev), op, b)
		case b.Start > op.Start+int64(Slack):
			c.violate("previous", fmt.Sprintf("%s: Previous gave version %d, drawn after the compute began", ckey{op.Cfg, k}, op.Prev), op, b)
		}
	}
}

// checkExpiry: no read starts later than a value's life in Redis after it
// was stored (its TTL, plus the stale window WithStale serves it in) and
// returns it: not from Redis, not from a near tier, not from a copy kept
// WithStaleIfDown. A value is stored by the time an op showed it in Redis
// (see proves); a caller that joined a flight held open WithSoftTimeout
// may get what the flight read up to that timeout before it began, and
// one that joined any flight of its process, what it read before (see
// shared).
func (c *checker) checkExpiry() {
	for ck, ops := range c.keys {
		cfg := c.h.Plan.Caches[ck.cfg]
		life := cfg.TTL + cfg.Stale + cfg.Soft + Slack
		for _, r := range ops {
			v, ok := r.Vers[ck.key]
			if !isRead(r) || !r.ok() || !ok || v == NotFound {
				continue
			}
			stored, ok := c.stored[v]
			if !ok {
				continue
			}
			c.checked["expiry"]++
			if r.Start > stored+int64(life) && c.shared(ck, r, v, stored+int64(life)) != nil {
				c.excused["expiry"]++
				continue
			}
			if r.Start > stored+int64(life) {
				c.violate("expiry", fmt.Sprintf("%s returned version %d, in Redis by %s, %v after that (its life is %v)",
					ck, v, stamp(stored), time.Duration(r.Start-stored).Round(time.Millisecond), cfg.TTL+cfg.Stale), r)
			}
		}
	}
}

// checkStaleIfDown: a Fetch answers with a copy the near tier kept only
// in a Cache WithStaleIfDown, and only while Redis may be unreachable: a
// fault that can open the circuit began before the Fetch returned and
// healed at most DownBound before it began.
func (c *checker) checkStaleIfDown() {
	for _, r := range c.h.Ops {
		if !r.Down {
			continue
		}
		c.checked["stale-if-down"]++
		switch {
		case !c.h.Plan.Caches[r.Cfg].StaleIfDown:
			c.violate("stale-if-down", fmt.Sprintf("c%d: a kept copy served by a Cache without WithStaleIfDown", r.Cfg), r)
		case c.fault(down, r.Start-int64(DownBound), r.End) == nil:
			c.violate("stale-if-down", fmt.Sprintf("c%d: a kept copy served with no fault within %v", r.Cfg, DownBound), r)
		}
	}
}
