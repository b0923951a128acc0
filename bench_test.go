package dogpile

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

func BenchmarkCodec(b *testing.B) {
	c := New[beer](redistest.NopClient(b))
	v := beer{Name: "Pils", ABV: 4.8, Tags: []string{"lager", "crisp"}}
	enc, _ := c.encode(v)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.encode(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkFetchHit compares a Fetch hit with the raw floor it is measured
// against: a go-redis GET and a msgpack decode, over 1000 keys and one hot
// key.
func BenchmarkFetchHit(b *testing.B) {
	rdb := redistest.Start(b)
	ctx := context.Background()
	c := New[beer](rdb)
	v := beer{Name: "Pils", ABV: 4.8}
	const n = 1000
	for i := range n {
		if err := c.Set(ctx, strconv.Itoa(i), v, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	compute := func(context.Context) (beer, error) { return v, nil }
	for _, keys := range []int{n, 1} {
		b.Run("keys="+strconv.Itoa(keys)+"/raw", func(b *testing.B) {
			var i atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := c.valueKey(strconv.Itoa(int(i.Add(1)) % keys))
					raw, err := rdb.Get(ctx, k).Bytes()
					if err != nil {
						b.Fatal(err)
					}
					var got beer
					if err := msgpack.Unmarshal(raw[entry.HeaderLen:], &got); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		b.Run("keys="+strconv.Itoa(keys)+"/dogpile", func(b *testing.B) {
			var i atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := c.Fetch(ctx, strconv.Itoa(int(i.Add(1))%keys), time.Hour, compute); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkFetchMiss measures a winner's full miss path: GET, lock script,
// compute (free), store script.
func BenchmarkFetchMiss(b *testing.B) {
	rdb := redistest.Start(b)
	ctx := context.Background()
	c := New[beer](rdb)
	compute := func(context.Context) (beer, error) { return beer{Name: "Pils"}, nil }
	i := 0
	for b.Loop() {
		i++
		if _, err := c.Fetch(ctx, "miss"+strconv.Itoa(i), time.Minute, compute); err != nil {
			b.Fatal(err)
		}
	}
}
