package dogpile

import (
	"sync/atomic"
)

// How a Fetch looks for a key first. A GET is what a hit needs; a miss then
// sends the lock script (fetchScript, GET-or-lock), so its compute starts
// two round trips after the call. The lock script alone returns a value that
// is there as a GET would, so looking with it costs a hit the same one round
// trip (and the server a script's run, many times a GET's: bench/HISTORY.md,
// "Figures moved out of code comments"), and starts a miss's compute one
// round trip sooner.
//
// So a Cache looks with a GET while most of its first looks hit, and with
// the lock script while most miss: a cold start, a Redis that was flushed
// or failed over, keys read once. A new Cache starts with GETs: most
// processes start against a warm Redis. Only a Cache without freshness
// options or a near tier looks with the script: their hits need the
// value's TTL, or a tracked read, which the script does not give.
//
// While it looks with the script, a hit is a lock attempt as a miss is:
// it takes a turn among the Cache's lock attempts (see turns), and goes
// through the circuit breaker as a GET does. Like the GET, the look is
// sent by the first caller, on its own context, from its own goroutine:
// a hit needs no other goroutine, and a miss's lock attempt leaves at
// once, not after a goroutine started for the flight was scheduled (in a
// herd of callers woken together, that one waited behind the herd; see
// bench/HISTORY.md, "Figures moved out of code comments").

// looks keeps the score that picks the first look: a first look that
// misses raises it, one that hits lowers it, within [0, lookMax]. Above
// lookScript, Fetch looks with the script. A Cache starts at 0 (GETs),
// from where lookScript+1 more misses than hits move it to the script;
// from the top, lookScript more hits than misses move it back. A first
// look whose value does not decode, or that failed, is not scored. A
// hit's GET costs two atomic loads (script, then saw at the floor), no
// write. off (set by New, then read-only) keeps a Cache with freshness
// options or a near tier on GETs.
type looks struct {
	score atomic.Int32
	off   bool
}

const (
	lookMax    = 16
	lookScript = lookMax / 2
)

// script reports whether the next first look should be the lock script.
func (l *looks) script() bool { return !l.off && l.score.Load() > lookScript }

// saw records a first look's answer: a value (hit), or none.
func (l *looks) saw(hit bool) {
	for !l.off {
		s := l.score.Load()
		n := s + 1
		if hit {
			n = s - 1
		}
		if n < 0 || n > lookMax || l.score.CompareAndSwap(s, n) {
			return
		}
	}
}
