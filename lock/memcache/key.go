package memcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

const (
	// keyPrefix starts the key of a mutex whose name fits in a key as is.
	keyPrefix = "dogpile:mutex:"
	// hashedPrefix starts the key of a mutex whose name does not: it
	// differs from keyPrefix in its last byte, so no plain name can
	// produce a hashed key.
	hashedPrefix = "dogpile:mutex#"
	// maxKeyLen is memcached's limit on a key's length in bytes.
	maxKeyLen = 250
)

// keyFor returns the memcached key of the mutex called name. Memcached
// keys are at most 250 bytes of no space or control character; a name
// that would break either rule is replaced by the hex SHA-256 of it.
func keyFor(name string) string {
	if k := keyPrefix + name; len(k) <= maxKeyLen && plain(name) {
		return k
	}
	sum := sha256.Sum256([]byte(name))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// plain reports whether s has no byte that memcached's text protocol
// reads as a separator or a control character.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// maxRelativeExpiry is the longest expiry memcached reads as relative:
// anything longer is taken as a Unix time.
const maxRelativeExpiry = 30 * 24 * time.Hour

// checkTTL reports a TTL memcached cannot store as a lease's expiry.
func checkTTL(d time.Duration) error {
	if d < time.Second {
		return fmt.Errorf("ttl %v is below 1s, memcached's expiry resolution", d)
	}
	// What memcached is told (expiry) must stay a relative expiry: above
	// 30 days it reads the number as a Unix time, long past, and the lock
	// would expire at once while its holder believed it held.
	if d > maxRelativeExpiry-2*time.Second {
		return fmt.Errorf("ttl %v is above 30 days less 2 s, memcached's longest relative expiry once rounded up", d)
	}
	return nil
}

// expiry returns the whole seconds memcached is told for a lease of ttl:
// ttl rounded up, plus one. Memcached's clock ticks once a second and an
// item stored with expiry n expires at the n-th tick, which may come as
// soon as n-1 seconds later; the extra second makes the key outlive the
// holder's own deadline (stored time minus drift) in every case.
func expiry(ttl time.Duration) int32 {
	return int32((ttl+time.Second-1)/time.Second) + 1
}

// expireNow is the expiry that makes memcached drop an item at once: a
// release is a compare-and-swap to it, which, unlike delete, checks that
// the key still holds the lease's token.
const expireNow = -1
