package perclient

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestEntryGoesWithItsClient: each client of the three go-redis types has
// one entry, found again while the client lives and gone once it is
// garbage; a client of another type is its own key.
func TestEntryGoesWithItsClient(t *testing.T) {
	var m Map[*int]
	for i, client := range []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
	} {
		v := new(int)
		if got, loaded := m.LoadOrStore(client, v); loaded || got != v {
			t.Fatalf("%T: first LoadOrStore = %p, %v; want %p, false", client, got, loaded, v)
		}
		if got, loaded := m.LoadOrStore(client, new(int)); !loaded || got != v {
			t.Fatalf("%T: second LoadOrStore = %p, %v; want the first value, true", client, got, loaded)
		}
		if got, ok := m.Load(client); !ok || got != v {
			t.Fatalf("%T: Load = %p, %v", client, got, ok)
		}
		if m.Len() != i+1 {
			t.Fatalf("Len = %d after %d clients", m.Len(), i+1)
		}
		_ = client.Close()
	}
	redistest.Collected(t, "the entries of dropped clients to go", func() bool { return m.Len() == 0 })
}

// other is a client of a type go-redis does not make.
type other struct{ redis.UniversalClient }

func TestOtherClientIsItsOwnKey(t *testing.T) {
	var m Map[int]
	c := &other{}
	m.LoadOrStore(c, 1)
	if v, ok := m.Load(c); !ok || v != 1 {
		t.Fatalf("Load = %d, %v; want 1, true", v, ok)
	}
	if _, ok := m.Load(&other{}); ok {
		t.Fatal("another client of the same type found the entry")
	}
}

// TestLoadAllocatesNothing: Load runs on every NewMutex (its batcher).
func TestLoadAllocatesNothing(t *testing.T) {
	var m Map[int]
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	m.LoadOrStore(client, 1)
	if n := testing.AllocsPerRun(1000, func() { m.Load(client) }); n != 0 {
		t.Errorf("Load: %v allocations; want 0", n)
	}
}

// TestLoadOrNewMakesOnce: LoadOrNew makes a client's value on its first
// use only, and returns that value after.
func TestLoadOrNewMakesOnce(t *testing.T) {
	var m Map[*int]
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	made := 0
	mk := func() *int { made++; return new(int) }
	first := m.LoadOrNew(client, mk)
	if again := m.LoadOrNew(client, mk); again != first || made != 1 {
		t.Fatalf("second LoadOrNew = %p (first %p), values made %d; want the first value, made once", again, first, made)
	}
	if got, ok := m.Load(client); !ok || got != first {
		t.Fatalf("Load = %p, %v; want the value LoadOrNew made", got, ok)
	}
}
