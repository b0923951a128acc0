package dogpile

import "sync/atomic"

// Copies of a flight's value, decoded for its waiting callers by the
// goroutine that ended it.
//
// Every caller gets a value of its own (a T may hold slices and maps the
// caller changes), so each waiter of a flight used to decode the flight's
// bytes itself when woken. A waiter is often a goroutine started for its
// request, whose stack begins at 2 KiB: its decode first grows the stack
// (see growStack), a copy of every frame on it that costs more than the
// decode itself. And across a fleet every process's waiters wake at once,
// when the value is stored: on shared cores the last of them waits behind
// all the others' work.
//
// So the goroutine that ends a flight, whose stack is already deep, goes
// on decoding after waking the waiters: a copy per waiter, from the last
// waiter's back towards the first's. Waiters take slots from the front. A
// waiter that finds its slot filled takes the copy; one that gets there
// first decodes its own, as before, and the ender stops once it meets the
// waiters. Nobody waits for the ender: on idle cores the waiters decode
// their own in parallel, as before; on busy ones, where late waiters wake
// late, the ender's copies save them the stack growth and the decode.

// maxCopies bounds the copies one flight's ender decodes: a larger herd's
// front decodes its own.
const maxCopies = 256

// copies are the slots of a flight's decoded values; see above.
type copies[T any] struct {
	slots []copySlot[T]
	m     meta         // the decoded entry's, the same for every slot
	next  atomic.Int32 // the next slot a waiter takes, from the front
}

type copySlot[T any] struct {
	v     T
	state atomic.Int32 // slotEmpty until a waiter takes it or the ender fills it
}

const (
	slotEmpty  = iota
	slotTaken  // a waiter got here first: it decodes its own
	slotFilled // the ender decoded v
)

// withCopies returns r with empty slots for the n callers waiting for
// its flight, if it carries a value worth copying.
func withCopies[T any](r outcome, n int) outcome {
	if r.b == nil || r.err != nil || n < 2 {
		return r // a waiter alone gains nothing: the ender's work is its own
	}
	r.copies = &copies[T]{slots: make([]copySlot[T], min(n, maxCopies))}
	return r
}

// fill decodes copies of r's value into its slots, from the back, until a
// waiter took the slot it would fill next, or every slot is filled. It
// runs after the flight ended, beside its woken waiters.
func (c *Cache[T]) fill(r outcome) {
	cs, _ := r.copies.(*copies[T])
	if cs == nil {
		return
	}
	for k := len(cs.slots) - 1; k >= 0 && int(cs.next.Load()) <= k; k-- {
		v, m, err := c.decodeEntry(r.b)
		if err != nil || m.notFound {
			return // each waiter sees the same from its own decode
		}
		s := &cs.slots[k]
		s.v = v
		if k == len(cs.slots)-1 {
			cs.m = m
		}
		if !s.state.CompareAndSwap(slotEmpty, slotFilled) {
			return
		}
	}
}

// take returns a copy decoded for the calling waiter, if the ender got to
// its slot first.
func (cs *copies[T]) take() (v T, m meta, ok bool) {
	i := int(cs.next.Add(1)) - 1
	if i >= len(cs.slots) {
		return v, m, false
	}
	s := &cs.slots[i]
	if s.state.CompareAndSwap(slotEmpty, slotTaken) {
		return v, m, false
	}
	v, s.v = s.v, v // the slot holds no reference to what the caller may keep
	return v, cs.m, true
}
