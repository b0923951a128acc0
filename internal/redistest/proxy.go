package redistest

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A Proxy forwards TCP connections to a Redis server and can lose a reply
// on purpose: the fault behind go-redis's automatic retries, where a
// command ran on the server but its caller never heard back. It can also
// hold replies back, as a congested network or a slow peer would.
type Proxy struct {
	l       net.Listener
	target  string
	toDrop  atomic.Int64 // replies still to drop
	dropped atomic.Int64
	delay   atomic.Int64 // how long each reply is held back, in ns
	reqs    atomic.Int64 // how long each request is held back, in ns
	held    atomic.Int64 // requests held back, not yet sent on

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy starts a proxy to target on a free loopback port and stops it,
// closing every connection, in tb.Cleanup.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// DropNextReply makes the proxy swallow the next bytes the server sends on
// any connection and close that connection, as a network failure would
// after the server has executed the command.
func (p *Proxy) DropNextReply() { p.DropReplies(1) }

// DropReplies makes the proxy lose the next n replies, each as
// [Proxy.DropNextReply] does: a client that reconnects and sends again
// loses its reply again until n are gone.
func (p *Proxy) DropReplies(n int64) { p.toDrop.Store(n) }

// DelayReplies holds every reply back by d from the moment the proxy
// reads it before the client gets it, in order on each connection, until
// it is called again with 0. The server
// has executed the command by then: only its answer is late.
func (p *Proxy) DelayReplies(d time.Duration) { p.delay.Store(int64(d)) }

// DelayRequests holds every request back by d from the moment the proxy
// reads it before the server gets it, in order on each connection, until it
// is called again with 0 (a request read before then keeps its delay): a
// command that reaches the server after its caller gave up, and after
// commands the caller sent later on other connections.
func (p *Proxy) DelayRequests(d time.Duration) { p.reqs.Store(int64(d)) }

// HeldRequests returns how many requests are held back (see DelayRequests).
func (p *Proxy) HeldRequests() int64 { return p.held.Load() }

// Dropped returns how many replies were dropped.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Go(func() { p.pipe(s, c, false) })
		p.wg.Go(func() { p.pipe(c, s, true) })
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst: replies (server to client), which may be
// dropped or delayed, or requests, which may be delayed (see delayed).
func (p *Proxy) pipe(dst, src net.Conn, replies bool) {
	defer dst.Close()
	defer src.Close()
	if replies {
		p.delayed(dst, src, &p.delay, nil, true)
		return
	}
	p.delayed(dst, src, &p.reqs, &p.held, false)
}

// A chunk is what one read of a stream returned, when, and the delay in
// force then.
type chunk struct {
	b  []byte
	at time.Time
	d  time.Duration
}

// delayed copies from src to dst, each chunk written a delay after it was
// read (not after the chunk before it was written: chunks that come while
// one is held back wait no longer than it). Replies (drops) take the
// delay in force when they are written, so DelayReplies(0) lets the held
// ones go, and may be dropped (see DropReplies); requests keep the one in
// force when they were read, and are counted in p.held while held.
func (p *Proxy) delayed(dst, src net.Conn, delay, held *atomic.Int64, drops bool) {
	chunks := make(chan chunk, 1024)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if drops && p.take() {
					p.dropped.Add(1)
					return
				}
				c := chunk{append([]byte(nil), buf[:n]...), time.Now(), time.Duration(delay.Load())}
				if held != nil {
					held.Add(1)
				}
				select {
				case chunks <- c:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if drops {
			c.d = time.Duration(delay.Load())
		}
		time.Sleep(time.Until(c.at.Add(c.d)))
		_, err := dst.Write(c.b)
		if held != nil {
			held.Add(-1)
		}
		if err != nil {
			_ = src.Close() // ends the reader
			return
		}
	}
}

// take claims one of the replies to drop, if any are left.
func (p *Proxy) take() bool {
	for {
		n := p.toDrop.Load()
		if n <= 0 {
			return false
		}
		if p.toDrop.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

func (p *Proxy) close() {
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
