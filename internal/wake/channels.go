package wake

import (
	"context"
	"slices"
	"time"
)

// A hub subscribes to a channel when its first Sub arrives and unsubscribes
// when its last leaves. Neither network call is made under h.mu, and the
// unsubscribe runs in the background: a waiter that gives up on its
// deadline while Redis is frozen must not wait for Redis on its way out
// (an UNSUBSCRIBE to a stopped server, queued behind others', cost callers
// up to seconds past their deadline). The io token keeps the calls in the
// order they were decided, and an unsubscribe that finds the channel
// wanted again by then does nothing.

// unsubscribeTimeout bounds a background UNSUBSCRIBE. A failed one leaves a
// channel nobody listens to on a connection that closes with its last
// waiter: harmless.
const unsubscribeTimeout = time.Second

func (h *hub) add(ctx context.Context, s *Sub) (<-chan struct{}, error) {
	h.mu.Lock()
	e := h.chans[s.ch]
	fresh := e == nil
	if fresh {
		e = &entry{ready: make(chan struct{})}
		h.chans[s.ch] = e
	}
	e.subs = append(e.subs, s)
	waiting.Add(1)
	h.mu.Unlock()
	if !fresh {
		return e.ready, nil
	}
	// On error the caller closes s, which undoes the entry.
	return e.ready, h.subscribe(ctx, s.ch)
}

// subscribe sends SUBSCRIBE for ch in its turn. The call runs on a
// goroutine of its own, which the caller stops waiting for when ctx ends:
// go-redis's PubSub holds a mutex (not ctx-aware) across its round trips,
// and on a frozen server one caller's call held it for seconds while
// others queued behind it past their deadlines. The call still ends
// within go-redis's own timeouts, and the turn passes on then.
func (h *hub) subscribe(ctx context.Context, ch string) error {
	select {
	case h.io <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-h.io }()
		if h.sharded {
			done <- h.ps.SSubscribe(ctx, ch)
		} else {
			done <- h.ps.Subscribe(ctx, ch)
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hub) remove(s *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.chans[s.ch]
	if e == nil {
		return
	}
	before := len(e.subs)
	e.subs = slices.DeleteFunc(e.subs, func(x *Sub) bool { return x == s })
	waiting.Add(int64(len(e.subs) - before))
	if len(s.c) > 0 {
		// s leaves holding a wake-up it will never act on: pass it on, or
		// a wake-one message would be lost for this process.
		e.wakeOne("")
	}
	if len(e.subs) > 0 || h.closed {
		return
	}
	delete(h.chans, s.ch)
	go h.unsubscribe(s.ch)
}

// unsubscribe drops ch on the server, unless a Sub wants it again by the
// time the calls decided before are done.
func (h *hub) unsubscribe(ch string) {
	h.io <- struct{}{}
	defer func() { <-h.io }()
	h.mu.Lock()
	wanted := h.chans[ch] != nil || h.closed
	h.mu.Unlock()
	if wanted {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
	defer cancel()
	if h.sharded {
		_ = h.ps.SUnsubscribe(ctx, ch)
	} else {
		_ = h.ps.Unsubscribe(ctx, ch)
	}
}
