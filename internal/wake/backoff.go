package wake

import (
	"math/rand/v2"
	"time"
)

// A Backoff spaces the attempts of a waiter that polls: each wait is drawn
// at random below a bound that doubles from min up to max ("full jitter"),
// so that waiters who all saw the same busy lock spread out instead of
// retrying together.
type Backoff struct{ next, max time.Duration }

// NewBackoff returns a backoff whose bound starts at min and doubles up to
// max. Both must be positive.
func NewBackoff(min, max time.Duration) Backoff { return Backoff{next: min, max: max} }

// Next returns the next wait: at least a millisecond, and below the
// current bound plus a millisecond.
func (b *Backoff) Next() time.Duration {
	d := rand.N(b.next) + time.Millisecond
	b.next = min(2*b.next, b.max)
	return d
}
