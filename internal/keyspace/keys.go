package keyspace

import (
	"strings"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// Keys are the Redis names of one cache key. They share the hash tag
// "{...}", so they land in one cluster slot and one script may touch all.
type Keys struct {
	Value    string // the encoded value, with the caller's TTL
	Lock     string // compute lock: the holder's token, with the lease as TTL
	Errs     string // hash {token: error text} of recently failed computes
	Channel  string // wake-ups: a value was stored, a compute failed, ...
	Throttle string // set for the retry interval after a failed refresh
}

// For derives the other names of a cache key from its value key. Only
// the miss path needs them: a hit builds the value key alone.
func For(value string) Keys {
	return Keys{Value: value, Lock: value + ":lock", Errs: value + ":err", Channel: value + ":wake", Throttle: value + ":retry"}
}

// Tags (see Tag, InvalidateTag). A tag t of a Cache with prefix p has a set
// "p tag:{t}" of the value keys stored with it, which expires no sooner
// than the last of them, and an epoch "p tagv:{t}", a counter that each
// InvalidateTag of t bumps (it expires a day after the last one); while an
// InvalidateTag works, the set is moved aside to "p tag:{t}:<token>",
// listed in the registry "p tagx:{t}" until it is voided (see
// Invalidate). All share the tag's hash slot; a value's keys share
// another.

// What follows a Cache's prefix in the names of a tag's keys (see above,
// "Tags"), before the tag's hash tag.
const (
	tagSetName      = "tag:"  // its set of value keys, and the sets moved aside
	tagEpochName    = "tagv:" // its epoch
	tagRegistryName = "tagx:" // its registry of sets moved aside
)

// TagKeys are the Redis names of tag t: its set of value keys, and its
// epoch. Both share t's hash slot.
func (s *Space) TagKeys(t string) (set, epoch string) {
	tag := redisutil.Tag(t)
	return s.Prefix + tagSetName + tag, s.Prefix + tagEpochName + tag
}

// A Kind is what a key is to a Cache, told from its name.
type Kind int

const (
	Foreign     Kind = iota // not a key of this Cache
	PerKey                  // a cache key's value, lock, error records or retry mark
	TagSet                  // a tag's set of value keys
	TagAside                // a tag's set moved aside by an InvalidateTag
	TagEpoch                // a tag's epoch
	TagRegistry             // a tag's registry of sets moved aside
)

// perKeySuffixes follow a cache key's hash tag in the names of its keys.
var perKeySuffixes = For("")

// Kind tells what key is, from its name: the Cache's prefix, a hash tag
// as redisutil.Tag makes one, and what the Cache puts around it (see For
// and TagKeys).
func (s *Space) Kind(key string) Kind {
	rest, ok := strings.CutPrefix(key, s.Prefix)
	if !ok {
		return Foreign
	}
	if suffix, ok := afterTag(rest); ok {
		switch ks := perKeySuffixes; suffix {
		case ks.Value, ks.Lock, ks.Errs, ks.Throttle:
			return PerKey
		}
		return Foreign
	}
	for _, tk := range tagKinds {
		t, ok := strings.CutPrefix(rest, tk.name)
		if !ok {
			continue
		}
		suffix, ok := afterTag(t)
		switch {
		case ok && suffix == "":
			return tk.kind
		case ok && tk.kind == TagSet && strings.HasPrefix(suffix, ":") && redisutil.IsToken(suffix[1:]):
			return TagAside
		}
		return Foreign
	}
	return Foreign
}

// tagKinds are the keys of a tag by the names that follow the prefix.
var tagKinds = []struct {
	name string
	kind Kind
}{{tagSetName, TagSet}, {tagEpochName, TagEpoch}, {tagRegistryName, TagRegistry}}

// afterTag returns what follows the hash tag that s starts with, if it
// starts with one made by redisutil.Tag: "{name}", name not empty and
// without braces, or "{hash}#", hash 32 hex digits.
func afterTag(s string) (string, bool) {
	inner, ok := strings.CutPrefix(s, "{")
	if !ok {
		return "", false
	}
	name, rest, ok := strings.Cut(inner, "}")
	switch {
	case !ok || name == "" || strings.Contains(name, "{"):
		return "", false
	case strings.HasPrefix(rest, "#"):
		return rest[1:], len(name) == hashedTagLen && strings.Trim(name, "0123456789abcdef") == ""
	}
	return rest, true
}

// hashedTagLen is the length of the hash that stands for a name with a
// brace in a hash tag (see redisutil.Tag).
const hashedTagLen = 32
