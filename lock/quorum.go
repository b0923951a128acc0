package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// A nodeReply is one Redlock server's answer: ok is its vote (granted,
// extended, released, held), v a number that goes with it (a holder's or
// the lease's PTTL), err its failure.
type nodeReply struct {
	ok  bool
	v   int64
	err error
}

// errNoReply stands for a server that had not answered when its round
// ended.
var errNoReply = errors.New("no reply in time")

// A nodeCall is one server's part of a round: its request to server i,
// on client c.
type nodeCall func(ctx context.Context, c redis.UniversalClient, i int) nodeReply

// each sends call to every server at once, each request bounded by
// timeout, and returns the replies in server order as soon as the outcome
// is decided (a majority said yes, or a majority said no, or a majority
// failed, or every server answered), and then waits up to linger for the
// rest. It returns earlier when ctx ends, and at timeout (go-redis can
// block on a hung server beyond a context's deadline). A server that has
// not answered by then counts as failed (errNoReply).
//
// Why not wait for every server: a hung or dead one answers only at its
// timeout, and a renewal that waited for it was confirmed that much later
// than its majority answered; the watchdog's next renewal was due an
// interval after that, so with one server of three hung every lease was
// lost within 1.4 TTLs, although two servers answered each renewal at
// once.
//
// The requests outlive the round: they run detached from ctx's
// cancellation, each to its own timeout, so that a slow server still gets
// the renewal or release that its round no longer waits for. A reply that
// comes after the round returned goes to late, if not nil, on that
// server's goroutine; late must return within a bounded time. Every reply
// goes either into the result or to late: never both, never neither.
func (r *Redlock) each(ctx context.Context, timeout, linger time.Duration, call nodeCall, late func(i int, rep nodeReply)) []nodeReply {
	rd := &round{out: make([]nodeReply, len(r.clients)), quorum: r.quorum,
		decided: make(chan struct{}), all: make(chan struct{}), late: late}
	if err := ctx.Err(); err != nil {
		for i := range rd.out {
			rd.out[i].err = fmt.Errorf("%w: %w", err, redisutil.ErrNotSent) // the caller is gone: nothing to send, nothing to undo
		}
		return rd.out
	}
	for i := range rd.out {
		rd.out[i].err = errNoReply
	}
	detached := context.WithoutCancel(ctx)
	for i, c := range r.clients {
		go func() {
			nctx, cancel := context.WithTimeout(detached, timeout)
			rep := call(nctx, c, i)
			cancel()
			rd.receive(i, rep)
		}()
	}
	t := time.NewTimer(timeout + 10*time.Millisecond)
	defer t.Stop()
	select {
	case <-rd.decided:
		if linger > 0 {
			t.Reset(linger)
			select {
			case <-rd.all:
			case <-t.C:
			case <-ctx.Done():
			}
		}
	case <-t.C:
	case <-ctx.Done(): // the caller's deadline wins over the servers'
	}
	return rd.end()
}

// A round collects the replies of each until it ends.
type round struct {
	mu      sync.Mutex
	out     []nodeReply
	yes, no int  // answers in out
	failed  int  // errors in out (foreign data is an answer: no)
	quorum  int  // a majority of len(out)
	over    bool // ended: later replies go to late
	settled bool // decided is closed
	decided chan struct{}
	all     chan struct{} // closed once every server's reply is in out
	late    func(i int, rep nodeReply)
}

// receive records server i's reply, and closes decided when no reply to
// come can change the outcome: a majority said yes, or said no, or failed.
// A mix of noes and failures waits for the rest, as which of the two rules
// out a majority tells a busy lock from an unreachable one. Once the round
// has ended, the reply goes to late instead.
func (rd *round) receive(i int, rep nodeReply) {
	rd.mu.Lock()
	if rd.over {
		rd.mu.Unlock()
		if rd.late != nil {
			rd.late(i, rep)
		}
		return
	}
	defer rd.mu.Unlock()
	rd.out[i] = rep
	switch {
	case rep.ok:
		rd.yes++
	case rep.err == nil || foreign(rep.err):
		rd.no++
	default:
		rd.failed++
	}
	n, minority := len(rd.out), len(rd.out)-rd.quorum
	in := rd.yes + rd.no + rd.failed
	if !rd.settled && (rd.yes >= rd.quorum || rd.no > minority || rd.failed > minority || in == n) {
		rd.settled = true
		close(rd.decided)
	}
	if in == n {
		close(rd.all)
	}
}

// end ends the round, and returns its replies: from here on no goroutine
// writes them.
func (rd *round) end() []nodeReply {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.over = true
	return rd.out
}
