// Package keyspace names the keys a Cache keeps in Redis and works on
// them beyond one value's read and compute: the keys of a cache key (For),
// what a key is to a Cache (Kind), its tags (the sets and epochs that
// InvalidateTag bumps and voids), and Clear. It works on names and
// scripts, never on values.
package keyspace

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// A Space is the keys of one Cache: its client, its prefix, and what a
// write of it sends besides keys.
type Space struct {
	Client  redis.UniversalClient
	Prefix  string
	Publish string          // PUBLISH or SPUBLISH, for the scripts' wake-ups
	Stale   time.Duration   // the Cache's stale window: a voided value stays that long, stale
	Forget  func(vk string) // drops the Cache's copies and flights of a value key it voided
}
