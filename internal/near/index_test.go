package near

import (
	"fmt"
	"testing"
)

// newTestTier returns an Index with tracking up, and the store it changes:
// a map of values by value key.
func newTestTier() (*Index, map[string]string) {
	store := make(map[string]string)
	x := NewIndex(Handlers{
		Remove: func(vk string) { delete(store, vk) },
		Purge:  func() { clear(store) },
		Forget: func(string) {},
	})
	x.setUp(true)
	return x, store
}

// TestTicketRace: a value read before an invalidation (or a loss of
// tracking, or this process's own write) of its key cannot enter the tier
// after it, however late the read's reply.
func TestTicketRace(t *testing.T) {
	x, store := newTestTier()
	const vk = "p:{k}" // a value key (see isValueKey)
	cases := []struct {
		name      string
		meanwhile func()
	}{
		{"invalidation", func() { x.invalidate([]string{vk}) }},
		{"other key", func() {}},
		{"down and up", func() { x.setUp(false); x.setUp(true) }},
		{"own write", func() { x.Drop(vk) }},
	}
	for _, tc := range cases {
		tk := x.Ticket(vk)
		tc.meanwhile()
		x.Admit(vk, tk, func() { store[vk] = "old" })
		_, ok := store[vk]
		if want := tc.name == "other key"; ok != want {
			t.Errorf("%s between the ticket and the insert: stored = %v; want %v", tc.name, ok, want)
		}
		clear(store)
	}
}

// TestRefusedPutDropsOlderCopy: a value read from Redis that may not enter
// the near tier (its ticket failed: here another key of its stripe was
// invalidated meanwhile) removes the copy the tier holds, which is no
// newer than it: the caller about to return the value must not find the
// older one at its next Fetch.
func TestRefusedPutDropsOlderCopy(t *testing.T) {
	x, store := newTestTier()
	const vk = "p:{k}"
	other := ""
	for i := 0; other == ""; i++ {
		if k := fmt.Sprintf("p:{other%d}", i); x.stripe(k) == x.stripe(vk) {
			other = k
		}
	}
	put := func(v string, tk Ticket) { x.Admit(vk, tk, func() { store[vk] = v }) }
	put("v1", x.Ticket(vk))
	if _, ok := store[vk]; !ok {
		t.Fatal("v1 did not enter the tier")
	}
	tk := x.Ticket(vk)
	x.invalidate([]string{other})
	put("v2", tk)
	if v, ok := store[vk]; ok {
		t.Errorf("the tier still holds %q after a newer read was refused", v)
	}
}
