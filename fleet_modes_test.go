package dogpile_test

// The modes of the fleet children that fill a cold key or keys (see
// fleet_child_test.go): a stampede on one key, on many, on batches, and
// the holders whose compute never ends, to be killed.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// procOne: every worker fetches "k", whose compute takes 100 ms.
func procOne(p *proc) {
	p.ready()
	p.fetchK(p.compute("k", 100*time.Millisecond))
}

// procHolder: like procOne, but without waiting for "go", and the compute
// says "computing" and never returns (until SIGKILL).
func procHolder(p *proc) {
	p.fetchK(func(ctx context.Context) (string, error) {
		if err := p.countKey(ctx, "k"); err != nil {
			return "", err
		}
		p.say("computing")
		select {}
	})
}

// fetchK has every worker fetch "k" once with compute.
func (p *proc) fetchK(compute func(context.Context) (string, error)) {
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			v, err := p.c.Fetch(context.Background(), "k", time.Minute, compute)
			p.check(v, "v:k", err)
		})
	}
	wg.Wait()
}

// procMany: every worker fetches 25 random keys of 1000, each compute
// taking 20 ms; the result lists the keys fetched.
func procMany(p *proc) {
	p.ready()
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for range 25 {
				i := rand.N(1000)
				key := strconv.Itoa(i)
				v, err := p.c.Fetch(context.Background(), key, time.Minute, p.compute(key, 20*time.Millisecond))
				p.check(v, "v:"+key, err)
				p.mu.Lock()
				seen[i] = true
				p.mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := range seen {
		p.res.Keys = append(p.res.Keys, i)
	}
}

// compute returns a compute of key that counts itself in the hash
// "computes" and takes d.
func (p *proc) compute(key string, d time.Duration) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if err := p.countKey(ctx, key); err != nil {
			return "", err
		}
		time.Sleep(d) // a slow load
		return "v:" + key, nil
	}
}

// countKey adds one to key's count in the hash "computes", shared by every
// process.
func (p *proc) countKey(ctx context.Context, key string) error {
	return p.rdb.HIncrBy(ctx, p.prefix+"computes", key, 1).Err()
}

// batchKeys are the keys of the batch modes.
func batchKeys() []string {
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	return keys
}

// procBatch: every worker FetchMany's a window of 120 of the 200 batch
// keys, starting at a different place (all windows overlap), each compute
// taking 20 ms.
func procBatch(p *proc) {
	p.ready()
	keys := batchKeys()
	var wg sync.WaitGroup
	for range p.workers {
		from := rand.N(len(keys))
		mine := append(append([]string{}, keys[from:]...), keys[:from]...)[:120]
		wg.Go(func() {
			got, err := p.c.FetchMany(context.Background(), mine, time.Minute, p.computeMany(nil))
			if err != nil {
				p.fail(err.Error())
			}
			for _, k := range mine {
				p.check(got[k], "v:"+k, nil)
			}
		})
	}
	wg.Wait()
}

// procBatchHolder: one FetchMany of all 200 batch keys, without waiting
// for "go"; its compute says "computing" and never returns (until
// SIGKILL).
func procBatchHolder(p *proc) {
	computing := func() {
		p.say("computing")
		select {}
	}
	_, _ = p.c.FetchMany(context.Background(), batchKeys(), time.Minute, p.computeMany(computing))
}

// computeMany returns a batch compute that counts each key in the hash
// "computes", then calls hold if there is one, then takes 20 ms.
func (p *proc) computeMany(hold func()) func(ctx context.Context, keys []string) (map[string]string, error) {
	return func(ctx context.Context, keys []string) (map[string]string, error) {
		_, err := p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, k := range keys {
				pipe.HIncrBy(ctx, p.prefix+"computes", k, 1)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if hold != nil {
			hold()
		}
		time.Sleep(20 * time.Millisecond) // a slow load
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = "v:" + k
		}
		return m, nil
	}
}
