package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// The batch scenarios (issue 10): FetchMany of 100 keys that all hit,
// against the floor of any batch read (one MGET and a decode per value) and
// against 100 Fetch calls in a row; and 100 keys missing at once in 4
// processes (see many_miss_bench_test.go).

const manyKeys = 100

// A batchLib reads a batch of keys through one approach.
type batchLib struct {
	name string
	// setup stores v under key as the approach reads it, and returns the
	// batch read of one process.
	setup func(rdb *redis.Client) (set func(ctx context.Context, key string, v item) error, get batchGet)
}

type batchGet func(ctx context.Context, keys []string) (map[string]item, error)

var errUnexpectedMiss = errors.New("batch hit benchmark: unexpected miss")

func unexpectedMiss(context.Context, []string) (map[string]item, error) {
	return nil, errUnexpectedMiss
}

var batchLibs = []batchLib{
	{"dogpile.FetchMany", func(rdb *redis.Client) (func(context.Context, string, item) error, batchGet) {
		c := dogpile.New[item](rdb, dogpile.WithPrefix("many:"))
		set := func(ctx context.Context, k string, v item) error { return c.Set(ctx, k, v, cacheTTL) }
		return set, func(ctx context.Context, keys []string) (map[string]item, error) {
			return c.FetchMany(ctx, keys, cacheTTL, unexpectedMiss)
		}
	}},
	{"dogpile.Fetch-loop", func(rdb *redis.Client) (func(context.Context, string, item) error, batchGet) {
		c := dogpile.New[item](rdb, dogpile.WithPrefix("many:"))
		set := func(ctx context.Context, k string, v item) error { return c.Set(ctx, k, v, cacheTTL) }
		miss := func(context.Context) (item, error) { return item{}, errUnexpectedMiss }
		return set, func(ctx context.Context, keys []string) (map[string]item, error) {
			out := make(map[string]item, len(keys))
			for _, k := range keys {
				v, err := c.Fetch(ctx, k, cacheTTL, miss)
				if err != nil {
					return out, err
				}
				out[k] = v
			}
			return out, nil
		}
	}},
	{"go-redis/mget+msgpack", func(rdb *redis.Client) (func(context.Context, string, item) error, batchGet) {
		return func(ctx context.Context, k string, v item) error { return setItem(ctx, rdb, k, v) },
			func(ctx context.Context, keys []string) (map[string]item, error) {
				vals, err := rdb.MGet(ctx, keys...).Result()
				if err != nil {
					return nil, err
				}
				out := make(map[string]item, len(keys))
				for i, v := range vals {
					s, ok := v.(string)
					if !ok {
						return out, errUnexpectedMiss
					}
					var it item
					if err := msgpack.Unmarshal([]byte(s), &it); err != nil {
						return out, err
					}
					out[keys[i]] = it
				}
				return out, nil
			}
	}},
}

// BenchmarkFetchMany measures batches of 100 keys: one op is one batch.
//
//   - hits-keys=100-G16: 16 goroutines read the same 100 cached keys, a
//     batch at a time. go-redis/mget+msgpack is the floor (one MGET, one
//     msgpack decode per value); dogpile.Fetch-loop is 100 Fetch calls in
//     a row (concurrent loops share some GETs in Fetch's flights).
//   - hits-keys=100-G1: the same with one goroutine: what one caller waits.
//   - misses-keys=100-P4-compute50ms: see runManyMiss.
func BenchmarkFetchMany(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, g := range []int{16, 1} {
		b.Run(fmt.Sprintf("hits-keys=%d-G%d", manyKeys, g), func(b *testing.B) {
			for _, lib := range rotated(batchLibs) {
				b.Run(lib.name, func(b *testing.B) { runManyHit(b, srv.Addr(), lib, g) })
			}
		})
	}
	b.Run(fmt.Sprintf("misses-keys=%d-P%d-compute%dms", manyKeys, manyMissProcs, manyMissCompute/time.Millisecond), func(b *testing.B) {
		for _, lib := range rotated(manyMissLibs) {
			b.Run(lib, func(b *testing.B) { runManyMiss(b, srv.Addr(), lib) })
		}
	})
}

func runManyHit(b *testing.B, addr string, lib batchLib, g int) {
	ctx := context.Background()
	var cmds traffic
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2 * g})
	defer rdb.Close()
	countCommands(rdb, &cmds)
	set, get := lib.setup(rdb)
	prefix := fmt.Sprintf("manyhit:%s:%d:", lib.name, time.Now().UnixNano())
	keys := make([]string, manyKeys)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
		if err := set(ctx, keys[i], newItem(keys[i])); err != nil {
			b.Fatal(err)
		}
	}
	check := func() bool {
		got, err := get(ctx, keys)
		if err == nil && len(got) != len(keys) {
			err = fmt.Errorf("%d values; want %d", len(got), len(keys))
		}
		if err != nil {
			b.Error(err)
		}
		return err == nil
	}
	var warm sync.WaitGroup // every goroutine's connection
	for range g {
		warm.Go(func() { check() })
	}
	warm.Wait()
	if b.Failed() {
		b.FailNow()
	}
	timedLoad(b, addr, &cmds, g, "batches/s", func(int) func() bool { return check })
}
