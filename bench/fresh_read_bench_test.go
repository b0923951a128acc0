package benchmarks

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// BenchmarkFreshRead measures what the freshness options cost a hit: with
// WithStale or WithEarlyRefresh a Redis read is a GET and a PTTL in one
// pipeline (two commands, one round trip), against plain dogpile's GET and
// the bare GET + decode; 1000 keys, 16 goroutines, as in BenchmarkFetchHit.
func BenchmarkFreshRead(b *testing.B) {
	srv := redistest.StartServer(b)
	libs := []cacheLib{
		dogpileLib("dogpile", "defaults: one GET per hit"),
		dogpileLib("dogpile+stale", "WithStale(1h): GET and PTTL pipelined", dogpile.WithStale(cacheTTL)),
		dogpileLib("dogpile+early", "WithEarlyRefresh(1): GET and PTTL pipelined", dogpile.WithEarlyRefresh(1)),
		cacheLibs[len(cacheLibs)-1], // go-redis/get+msgpack
	}
	for _, lib := range rotated(libs) {
		b.Run(lib.name, func(b *testing.B) { runHit(b, srv.Addr(), lib, 1000, 16) })
	}
}

func dogpileLib(name, how string, opts ...dogpile.Option) cacheLib {
	return cacheLib{name: name, how: how, newFetcher: func(rdb *redis.Client) fetcher {
		c := dogpile.New[item](rdb, opts...)
		return fetchWith(c)
	}}
}
