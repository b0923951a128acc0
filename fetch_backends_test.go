package dogpile

import "testing"

// TestFetchRing runs the cache behaviour suite on a 2-shard *redis.Ring:
// waiters subscribe on the shard that owns their key's hash tag.
func TestFetchRing(t *testing.T) {
	b := ringBackend(t)
	for _, tc := range behaviour {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, b) })
	}
}

// TestFetchSentinel runs the cache behaviour suite on a failover client
// that finds the master through a real sentinel.
func TestFetchSentinel(t *testing.T) {
	b := sentinelBackend(t)
	for _, tc := range behaviour {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, b) })
	}
}
