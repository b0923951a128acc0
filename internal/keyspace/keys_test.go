package keyspace

import (
	"testing"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// TestKind: every name a Space gives a key is told back as its kind, and
// names that only look alike (another prefix, a broken hash tag, a
// suffix of no key, a set aside without a token) are foreign, so that
// Clear removes only what a Cache wrote.
func TestKind(t *testing.T) {
	s := &Space{Prefix: "p:"}
	ks := For(redisutil.Key(s.Prefix, "k"))
	hashed := For(redisutil.Key(s.Prefix, "a{b}c"))
	set, epoch := s.TagKeys("t")
	hset, hepoch := s.TagKeys("x{y}")
	want := map[string]Kind{
		ks.Value: PerKey, ks.Lock: PerKey, ks.Errs: PerKey, ks.Throttle: PerKey,
		hashed.Value: PerKey, hashed.Lock: PerKey,
		set: TagSet, epoch: TagEpoch, hset: TagSet, hepoch: TagEpoch,
		set + ":" + redisutil.Token():               TagAside,
		"p:" + tagRegistryName + redisutil.Tag("t"): TagRegistry,

		ks.Channel:         Foreign, // a channel, not a key
		"q:{k}":            Foreign,
		"p:{k}x":           Foreign,
		"p:{k}:lockx":      Foreign,
		"p:{}":             Foreign,
		"p:{k}#":           Foreign,
		"p:plain":          Foreign,
		set + ":notatoken": Foreign,
		set + "x":          Foreign,
		"p:tag:":           Foreign,
	}
	for key, kind := range want {
		if got := s.Kind(key); got != kind {
			t.Errorf("Kind(%q) = %d; want %d", key, got, kind)
		}
	}
}

// TestFor: a cache key's names share its value key's hash tag (one slot),
// and are all different.
func TestFor(t *testing.T) {
	vk := redisutil.Key("p:", "k")
	ks := For(vk)
	names := []string{ks.Value, ks.Lock, ks.Errs, ks.Channel, ks.Throttle}
	seen := map[string]bool{}
	for _, n := range names {
		if redisutil.Slot(n) != redisutil.Slot(vk) {
			t.Errorf("%q is in slot %d; want %d, the value's", n, redisutil.Slot(n), redisutil.Slot(vk))
		}
		if seen[n] {
			t.Errorf("%q names two keys", n)
		}
		seen[n] = true
	}
}
