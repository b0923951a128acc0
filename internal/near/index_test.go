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
	x.setUp(true, false)
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
		{"down and up", func() { x.setUp(false, true); x.setUp(true, false) }},
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

// TestKeptOnLoss: with Handlers.Keep, a failed tracking connection leaves
// the store as it is (a tracker that stops empties it as before); a
// completed read of a key removes its kept copy, which is older than what
// the caller returns; tracking coming back empties the store.
func TestKeptOnLoss(t *testing.T) {
	const vk = "p:{k}"
	for _, tc := range []struct {
		name       string
		keep, lost bool
		wantKept   bool
	}{
		{"no Keep", false, true, false},
		{"Keep, lost", true, true, true},
		{"Keep, stopped", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := map[string]string{}
			keeps := 0
			h := Handlers{
				Remove: func(k string) { delete(store, k) },
				Purge:  func() { clear(store) },
				Forget: func(string) {},
			}
			if tc.keep {
				h.Keep = func() { keeps++ }
			}
			x := NewIndex(h)
			x.setUp(true, false)
			store[vk], store["p:{j}"] = "v1", "j1"
			x.setUp(false, tc.lost)
			if got := x.Kept(); got != tc.wantKept {
				t.Fatalf("Kept() = %v; want %v", got, tc.wantKept)
			}
			if got, want := len(store), map[bool]int{true: 2, false: 0}[tc.wantKept]; got != want {
				t.Fatalf("the store holds %d copies after the loss; want %d", got, want)
			}
			if tc.wantKept && keeps != 1 {
				t.Errorf("Keep called %d times; want 1", keeps)
			}
			x.Admit(vk, x.Ticket(vk), func() { store[vk] = "v2" })
			if v, ok := store[vk]; ok {
				t.Errorf("after a read while down the store holds %q; want nothing", v)
			}
			x.setUp(true, false)
			if x.Kept() || len(store) != 0 {
				t.Errorf("after tracking came back: Kept() = %v, store = %v; want false, empty", x.Kept(), store)
			}
		})
	}
}
