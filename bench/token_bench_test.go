package benchmarks

import (
	"testing"

	"github.com/google/uuid"

	"github.com/dogpile-go/dogpile/internal/redisutil"
)

var tokenSink string

// BenchmarkToken compares the owner tokens of the lock and the cache
// (redisutil.Token: 128 random bits as 22 base64 characters; TokenWith,
// the lock's "token:" value) with google/uuid's version 4 and 7 UUIDs as
// strings (36 characters), with and without the lock's ':' after them.
// bench/HISTORY.md ("Issue 40 item 6") says why the library keeps its own.
func BenchmarkToken(b *testing.B) {
	for _, tc := range []struct {
		name string
		f    func() string
	}{
		{"dogpile/Token", redisutil.Token},
		{"google/uuid/NewString", uuid.NewString},
		{"google/uuid/NewV7", func() string { return uuid.Must(uuid.NewV7()).String() }},
		{"dogpile/TokenWith", func() string { return redisutil.TokenWith(':') }},
		{"google/uuid/NewString+suffix", func() string { return uuid.NewString() + ":" }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tokenSink = tc.f()
			}
			b.ReportMetric(float64(len(tokenSink)), "chars")
		})
	}
}
