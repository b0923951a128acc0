package dogpile

import (
	"context"
	"time"

	"github.com/dogpile-go/dogpile/internal/near"
)

// A job is one key's miss in one process: what to compute and where to
// store it.
type job[T any] struct {
	flight  flightID // the flight the job serves
	key     string
	ks      keys
	ttl     time.Duration
	compute func(context.Context) (T, error)
	cl      *call    // the flight the result goes to
	refresh bool     // a background refresh (see refreshLater)
	first   []any    // FetchMany's lock reply for key (never "locked"), to start the miss from
	m       *miss[T] // the miss begun by Fetch's first look, with its reply (see lookWithScript)

	// How the miss starts (see Cache.runMiss).
	bad   string // SHA1 of stored bytes that did not decode, or ""
	down  bool   // Redis is unreachable and WithComputeWhenDown is set: compute without it
	force bool   // Refresh's: compute even if a value is there
}

// A read is one key's answer in a batch read.
type read struct {
	b    []byte
	pttl time.Duration // remaining TTL, when freshness options need it; -1: not read, or none
	err  error         // redis.Nil: no value
	// owner is, with the near tier, the Owner of b when it was read on a
	// tracked connection (see near.Owner).
	owner *near.Owner
}

// A manyFunc is FetchMany's compute.
type manyFunc[T any] func(ctx context.Context, missing []string) (map[string]T, error)

// A missing is a key that FetchMany did not find.
type missing struct {
	key, vk string
	bad     string // SHA1 of stored bytes that did not decode, or ""
	down    bool   // Redis is unreachable and WithComputeWhenDown is set
	tracked bool   // read on a near tier's tracked connection
	tk      near.Ticket
}

// A want is a missing key of a FetchMany and the flight that answers it.
type want struct {
	missing
	cl *call
}
