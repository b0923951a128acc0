package breaker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/sony/gobreaker/v2"
)

// stillDownEvery is how often a long outage is logged again.
const stillDownEvery = time.Minute

// An outageLog logs the outages of one client: one line when an outage
// begins, at most one a minute while it lasts, and one when it ends, to
// each logger attached to the client's caches and locks. The breaker logs,
// not the call that happened to see the change, so that every logger hears
// of every outage once.
type outageLog struct {
	client string // the client's servers, for the lines

	lastErr atomic.Pointer[error] // the latest failure reported

	remindEvery time.Duration // stillDownEvery; shorter in tests

	mu       sync.Mutex
	loggers  []weak.Pointer[slog.Logger] // weak: a logger dropped by its program is dropped here too
	down     time.Time                   // when the current outage began; zero while closed
	reminded time.Time                   // when it was last logged
}

// AddLogger makes b log its client's outages to l too. A logger given
// twice logs once.
func (b *Breaker) AddLogger(l *slog.Logger) {
	if l == nil {
		return
	}
	x := &b.log
	x.mu.Lock()
	defer x.mu.Unlock()
	w := weak.Make(l)
	live := x.loggers[:0]
	for _, p := range x.loggers {
		if p == w {
			w = weak.Pointer[slog.Logger]{} // already there
		}
		if p.Value() != nil {
			live = append(live, p)
		}
	}
	x.loggers = live
	if w != (weak.Pointer[slog.Logger]{}) {
		x.loggers = append(x.loggers, w)
	}
}

// failed records err, the failure about to be reported, for the lines.
func (x *outageLog) failed(err error) {
	if err != nil {
		x.lastErr.Store(&err)
	}
}

// change logs the transition from→to of the client's circuit, if it
// begins or ends an outage, or reminds of a long one. It runs in
// gobreaker's OnStateChange, under its lock: transitions are rare, and
// logging there keeps the lines in order.
func (x *outageLog) change(from, to gobreaker.State) {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := time.Now()
	attrs := []slog.Attr{slog.String("redis", x.client)}
	switch {
	case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
		x.down, x.reminded = now, now
		x.emit(slog.LevelError, "dogpile: redis unreachable; calls on this client fail fast until it answers again",
			append(attrs, x.errAttr())...)
	case to == gobreaker.StateOpen && now.Sub(x.reminded) >= x.remindEvery:
		x.reminded = now
		x.emit(slog.LevelWarn, "dogpile: redis still unreachable",
			append(attrs, slog.Duration("down", now.Sub(x.down)), x.errAttr())...)
	case to == gobreaker.StateClosed && !x.down.IsZero():
		x.emit(slog.LevelInfo, "dogpile: redis reachable again", append(attrs, slog.Duration("down", now.Sub(x.down)))...)
		x.down = time.Time{}
	}
}

func (x *outageLog) errAttr() slog.Attr {
	if p := x.lastErr.Load(); p != nil {
		return slog.Any("error", *p)
	}
	return slog.String("error", "")
}

// emit logs one line to every live logger. x.mu is held.
func (x *outageLog) emit(level slog.Level, msg string, attrs ...slog.Attr) {
	for _, p := range x.loggers {
		if l := p.Value(); l != nil {
			l.LogAttrs(context.Background(), level, msg, attrs...)
		}
	}
}
