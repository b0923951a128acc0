package lock

import (
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

func TestAcquireRetryIsIdempotent(t *testing.T) {
	// go-redis resends a script whose reply was lost. The resent acquire
	// must see its own token as success with the same fence, not as busy.
	rdb := redistest.Start(t)
	m := NewMutex(rdb, "retried")
	keys := []string{m.lock, m.fence, m.lock + ":h"}
	first, err := mutexAcquire.Run(t.Context(), rdb, keys, "tok", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	again, err := mutexAcquire.Run(t.Context(), rdb, keys, "tok", 1000).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if first[0] != 1 || again[0] != 1 || first[1] != again[1] {
		t.Errorf("acquire = %v, retry = %v; want both {1, same fence}", first, again)
	}
	other, _ := mutexAcquire.Run(t.Context(), rdb, keys, "other", 1000).Int64Slice()
	if other[0] != 0 || other[1] <= 0 || other[1] > 1000 {
		t.Errorf("foreign acquire = %v; want {0, pttl}", other)
	}
}

func TestMillisecondsRoundUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Microsecond, 1}, {999 * time.Microsecond, 1}, {time.Millisecond, 1},
		{1001 * time.Microsecond, 2}, {time.Hour * 24 * 30, 2592000000}, {1 << 62, 4611686018428},
	} {
		if got := ms(c.d); got != c.want {
			t.Errorf("ms(%v) = %d; want %d", c.d, got, c.want)
		}
	}
}

func TestKeysShareOneSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	for _, name := range []string{"a", "}", "{", "x{y}z", "{}", "orders:42"} {
		m := NewMutex(rdb, name)
		var slots []int64
		for _, k := range []string{m.lock, m.fence, m.channel} {
			slots = append(slots, rdb.ClusterKeySlot(t.Context(), k).Val())
		}
		if slots[0] != slots[1] || slots[0] != slots[2] {
			t.Errorf("%q: keys %s %s %s in slots %v; want one slot", name, m.lock, m.fence, m.channel, slots)
		}
	}
}
