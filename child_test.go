package dogpile

// This file holds the child side of the multi-process tests: the test
// binary re-executed with childEnv set runs childMain instead of the tests.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	childEnv   = "DOGPILE_TEST_CHILD" // the mode; unset in the parent
	addrsEnv   = "DOGPILE_TEST_ADDRS" // comma-separated; several mean a cluster
	prefixEnv  = "DOGPILE_TEST_PREFIX"
	leaseEnv   = "DOGPILE_TEST_LEASE"
	workersEnv = "DOGPILE_TEST_WORKERS"
)

// childResult is what a child prints on its last line, after "result ".
type childResult struct {
	Values int      // successful Fetch calls with the right value
	Errors []string // failed Fetch calls (first few)
	Keys   []int    // distinct keys fetched (mode many)
	Stats  Stats
}

// childClient connects to the parent's server, or cluster.
func childClient() redis.UniversalClient {
	addrs := strings.Split(os.Getenv(addrsEnv), ",")
	if len(addrs) > 1 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0]})
}

func childMain(mode string) int {
	if code, ok := procMain(mode); ok {
		return code
	}
	rdb := childClient()
	defer rdb.Close()
	lease, _ := time.ParseDuration(os.Getenv(leaseEnv))
	if lease == 0 {
		lease = 5 * time.Second
	}
	workers, _ := strconv.Atoi(os.Getenv(workersEnv))
	if workers == 0 {
		workers = 50
	}
	prefix := os.Getenv(prefixEnv)
	c := New[string](rdb, WithPrefix(prefix), WithLease(lease))
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(line string) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintln(out, line)
		out.Flush()
	}
	var once sync.Once
	c.onWait = func(string) { once.Do(func() { say("waiting") }) }

	// Every mode but holder starts on "go" from the parent, so that the
	// children's Fetch calls overlap.
	if mode != "holder" && mode != "batchholder" {
		say("ready")
		if !bufio.NewScanner(os.Stdin).Scan() {
			return 2
		}
	}
	compute := func(key string, d time.Duration) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			if err := rdb.HIncrBy(ctx, prefix+"computes", key, 1).Err(); err != nil {
				return "", err
			}
			if mode == "holder" {
				say("computing")
				select {} // until SIGKILL
			}
			time.Sleep(d) // a slow load
			return "v:" + key, nil
		}
	}

	var res childResult
	var mu sync.Mutex
	record := func(key, v string, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, err.Error())
			}
		case v != "v:"+key:
			if len(res.Errors) < 5 {
				res.Errors = append(res.Errors, fmt.Sprintf("Fetch(%q) = %q", key, v))
			}
		default:
			res.Values++
		}
	}
	var wg sync.WaitGroup
	switch mode {
	case "one", "holder":
		for range workers {
			wg.Go(func() {
				v, err := c.Fetch(ctx, "k", time.Minute, compute("k", 100*time.Millisecond))
				record("k", v, err)
			})
		}
	case "many":
		seen := map[int]bool{}
		for range workers {
			wg.Go(func() {
				for range 25 {
					i := rand.N(1000)
					key := strconv.Itoa(i)
					v, err := c.Fetch(ctx, key, time.Minute, compute(key, 20*time.Millisecond))
					record(key, v, err)
					mu.Lock()
					seen[i] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for i := range seen {
			res.Keys = append(res.Keys, i)
		}
	case "batch", "batchholder":
		batchChild(ctx, c, rdb, prefix, mode, workers, record, say)
	default:
		return 2
	}
	wg.Wait()
	res.Stats = c.Stats()
	b, _ := json.Marshal(res)
	say("result " + string(b))
	return 0
}

// batchChild runs workers goroutines that each FetchMany a window of 120
// of 200 keys, starting at a different place (all windows overlap); the
// compute counts each key in Redis. In mode batchholder, one FetchMany of
// all 200 keys computes forever (until SIGKILL).
func batchChild(ctx context.Context, c *Cache[string], rdb redis.UniversalClient, prefix, mode string, workers int,
	record func(key, v string, err error), say func(string)) {
	compute := func(ctx context.Context, keys []string) (map[string]string, error) {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.HIncrBy(ctx, prefix+"computes", k, 1)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if mode == "batchholder" {
			say("computing")
			select {} // until SIGKILL
		}
		time.Sleep(20 * time.Millisecond) // a slow load
		m := make(map[string]string, len(keys))
		for _, k := range keys {
			m[k] = "v:" + k
		}
		return m, nil
	}
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = strconv.Itoa(i)
	}
	if mode == "batchholder" {
		_, _ = c.FetchMany(ctx, keys, time.Minute, compute)
		return
	}
	var wg sync.WaitGroup
	for range workers {
		from := rand.N(len(keys))
		mine := append(append([]string{}, keys[from:]...), keys[:from]...)[:120]
		wg.Go(func() {
			got, err := c.FetchMany(ctx, mine, time.Minute, compute)
			if err != nil {
				record("", "", err)
			}
			for _, k := range mine {
				record(k, got[k], nil)
			}
		})
	}
	wg.Wait()
}
