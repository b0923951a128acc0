package near

import "time"

// A Config sets a Tracker's timings and connections. Each field left zero
// takes the default written under it (see init); a Tracker keeps its own
// copy, filled, for its life.
type Config struct {
	// Ping is how long the invalidation connection may stay silent before
	// it is pinged; a ping unanswered for as long again counts as a
	// dropped connection. It also bounds the tracking connections' writes
	// and handshakes, and the look for a Cluster's masters, and is how
	// often the tracker checks for an idle Cache, a refusal, or a
	// Cluster's changed masters.
	// default: 1s
	Ping time.Duration
	// Idle is how long a Cache goes without a Fetch before its tracker
	// closes its connections (and empties the near tier).
	// default: 1m
	Idle time.Duration
	// Backoff bounds the pause between attempts to restore tracking.
	// default: 1s
	Backoff time.Duration
	// Beat is how often a session's subscriber is pinged while it is up,
	// and at once on demand (see Tracker.Sync). Redis answers a
	// connection in order, so a ping's answer proves that every
	// invalidation Redis sent it before the ping has arrived.
	// default: 20ms
	Beat time.Duration
	// MaxLag is how long before a near hit the latest such proof may be
	// dated: while a connection's answers come later than that (a slow or
	// congested network, a stopped server), the tier is bypassed, and a
	// write that returned more than MaxLag ago is never answered from it
	// with the value it replaced. A reader is pinged every MaxLag/2 while
	// it is idle.
	// default: 100ms
	MaxLag time.Duration
	// Readers is how many tracked connections a session holds on each
	// node (see reader.go). Reads that find them all busy go through the
	// caller's client and put nothing into the tier. One: a tier is
	// filled by the reads that miss it, few once it is warm, and each
	// reader's pings cost Redis CPU in every process (see bench/HISTORY,
	// "Near tiers across a fleet").
	// -1 (not 0): none; every read goes through the caller's client.
	// default: 1
	Readers int
}

// init fills in the defaults of the fields left zero.
func (c *Config) init() {
	if c.Ping <= 0 {
		c.Ping = time.Second
	}
	if c.Idle <= 0 {
		c.Idle = time.Minute
	}
	if c.Backoff <= 0 {
		c.Backoff = time.Second
	}
	if c.Beat <= 0 {
		c.Beat = 20 * time.Millisecond
	}
	if c.MaxLag <= 0 {
		c.MaxLag = 100 * time.Millisecond
	}
	switch {
	case c.Readers == 0:
		c.Readers = 1
	case c.Readers < 0:
		c.Readers = -1
	}
}
