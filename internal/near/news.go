package near

import "sync"

// news lets goroutines wait for the next event of a kind: wait returns a
// channel that the next announce closes.
type news struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *news) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *news) announce() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
