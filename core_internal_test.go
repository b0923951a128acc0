package dogpile

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/keyspace"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/script"
)

// TestFirstLookAdapts: a Cache whose first looks mostly miss looks with
// the lock script at once (a miss sends no GET before it; a hit is that
// script's one round trip, counted as a hit), and with a GET once most
// hit, as a new Cache does. A Cache with a freshness option always looks
// with a GET.
func TestFirstLookAdapts(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	cmds := redistest.RecordCommands(rdb)
	ctx := context.Background()
	first := func(c *Cache[string], key string) string {
		cmds.Take()
		if _, err := c.Fetch(ctx, key, time.Minute, redistest.Constant("v")); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range cmds.Take() {
			if cmd == "get" || cmd == "eval" || cmd == "evalsha" { // not a WithStale Cache's clock probes
				return cmd
			}
		}
		return ""
	}
	c := New[string](rdb, prefix(t))
	defer c.Close()
	for i := range lookScript + 1 {
		if cmd := first(c, fmt.Sprint("cold", i)); cmd != "get" {
			t.Fatalf("miss %d of a new Cache looked with %s; want get", i, cmd)
		}
	}
	if cmd := first(c, "cold"); cmd != "evalsha" {
		t.Errorf("a miss after %d misses in a row looked with %s; want the lock script", lookScript+1, cmd)
	}
	hits := c.Stats().Hits
	if cmd := first(c, "cold0"); cmd != "evalsha" {
		t.Errorf("a hit of a Cache that mostly misses looked with %s; want the lock script", cmd)
	}
	if n := c.Stats().Hits - hits; n != 1 {
		t.Errorf("a value found by the lock script counted as %d hits; want 1", n)
	}
	first(c, "cold1")
	if cmd := first(c, "cold2"); cmd != "get" {
		t.Errorf("the third hit in a row looked with %s; want get", cmd)
	}

	stale := New[string](rdb, WithPrefix(t.Name()+":stale:"), WithStale(time.Minute))
	defer stale.Close()
	for i := range 2 * lookMax {
		if cmd := first(stale, fmt.Sprint("cold", i)); cmd != "get" {
			t.Fatalf("miss %d of a Cache WithStale looked with %s; want get (its hits need the TTL)", i, cmd)
		}
	}
}

// TestFirstLookThroughBreaker: a Cache that looks with the lock script
// goes through the client's circuit breaker as its GETs do: with the
// server frozen, its timeouts open the circuit, and later calls fail at
// once with ErrUnavailable instead of each waiting out the read timeout.
func TestFirstLookThroughBreaker(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	defer rdb.Close()
	c := New[string](rdb, prefix(t))
	defer c.Close()
	ctx := context.Background()
	for i := range lookScript + 1 {
		if _, err := c.Fetch(ctx, fmt.Sprint("cold", i), time.Minute, redistest.Constant("v")); err != nil {
			t.Fatal(err)
		}
	}
	if !c.looks.script() {
		t.Fatal("the Cache looks with GETs after a run of misses")
	}
	s.Pause()
	defer s.Resume()
	var last error
	for i := range 8 {
		_, last = c.Fetch(ctx, fmt.Sprint("frozen", i), time.Minute, redistest.Constant("v"))
	}
	if !errors.Is(last, ErrUnavailable) {
		t.Errorf("the 8th Fetch with the server frozen = %v; want ErrUnavailable (the circuit open)", last)
	}
	if n := c.Stats().Unavailable; n == 0 {
		t.Error("no call was turned away by the circuit")
	}
}

// TestScriptLookOnCallersContext: the lock script's first look is sent by
// the first caller, on its own context, as its GET would be, for a hit and
// for a miss alike, not by a goroutine started for the flight (on a
// context detached from the caller's): a herd of callers woken together
// would make that goroutine wait its turn behind them.
func TestScriptLookOnCallersContext(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	var mu sync.Mutex
	var deadlines []time.Time // of each Fetch's first script, while armed
	armed := false
	rdb.AddHook(redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				mu.Lock()
				if armed {
					d, _ := ctx.Deadline()
					deadlines, armed = append(deadlines, d), false
				}
				mu.Unlock()
			}
			return next(ctx, cmd)
		},
	})
	c := New[string](rdb, prefix(t))
	defer c.Close()
	c.looks.score.Store(lookMax) // most looks missed: the script looks
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, what := range []string{"miss", "hit"} {
		mu.Lock()
		armed = true
		mu.Unlock()
		if v, err := c.Fetch(ctx, "k", time.Minute, redistest.Constant("v")); err != nil || v != "v" {
			t.Fatalf("%s: Fetch = %q, %v", what, v, err)
		}
		if !c.looks.script() {
			t.Fatalf("%s: the Cache left the script look", what)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(deadlines) != 2 {
		t.Fatalf("saw %d first looks; want 2", len(deadlines))
	}
	for i, d := range deadlines {
		if !d.Equal(deadline) {
			t.Errorf("look %d ran with deadline %v; want the caller's, %v", i, d, deadline)
		}
	}
}

// TestScriptLookLockReleasedAtClose: a first look that took the compute
// lock for a Cache closed before its flight could start releases that
// lock, so that other processes need not wait a lease for a compute that
// will not come.
func TestScriptLookLockReleasedAtClose(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	c := New[string](rdb, prefix(t))
	defer c.Close()
	c.looks.score.Store(lookMax)
	rdb.AddHook(redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			err := next(ctx, cmd)
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				// After the look took the lock, before the flight starts.
				// Not in this goroutine: were the look part of the
				// Cache's work, Close would wait for it here.
				go c.Close()
				redistest.Within(5*time.Second, c.life.Done)
			}
			return err
		},
	})
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "k", time.Minute, redistest.Constant("v")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Fetch = %v; want ErrClosed", err)
	}
	lock := keyspace.For(c.valueKey("k")).Lock
	redistest.Eventually(t, "the lock released after Close", func() bool { return rdb.Exists(ctx, lock).Val() == 0 })
}

// TestScriptLookLeaderLeavesHoldingLock: when the first caller's context
// ends as its look takes the lock (the reply lost with it), the callers
// that joined it start over only once that lock is released: the look one
// of them leads then finds the key free, not this process's own lock to
// wait for as if another process computed (a false takeover).
func TestScriptLookLeaderLeavesHoldingLock(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	script.Fetch.Load(t.Context(), rdb) // each look one EVALSHA: the first, the leader's, takes the lock
	c := New[string](rdb, prefix(t))
	defer c.Close()
	c.looks.score.Store(lookMax)
	leaderCtx, leave := context.WithCancel(context.Background())
	defer leave()
	var looks atomic.Int32
	retried := make(chan struct{}) // closed once the second look was answered
	var retriedKind atomic.Int64
	holdRelease := func(cmds ...redis.Cmder) {
		for _, cmd := range cmds {
			if scriptOf(cmd) == script.Release.Hash() {
				// Held until the follower looked again, for a while: a
				// release that waits for nothing comes first.
				select {
				case <-retried:
				case <-time.After(300 * time.Millisecond):
				}
				return
			}
		}
	}
	rdb.AddHook(redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			switch scriptOf(cmd) {
			case script.Fetch.Hash():
				n := looks.Add(1)
				err := next(ctx, cmd)
				switch n {
				case 1: // the leader's: its lock taken, its caller leaves
					redistest.Within(5*time.Second, func() bool { return c.stats.shared.Load() > 0 }) // the follower joined
					leave()
					cmd.SetErr(context.Canceled)
					return context.Canceled
				case 2:
					if res, ok := cmd.(*redis.Cmd).Val().([]any); ok {
						kind, _ := script.At[int64](res, 0)
						retriedKind.Store(kind)
					}
					close(retried)
				}
				return err
			}
			return next(ctx, cmd)
		},
		Before: holdRelease,
	})
	done := make(chan error, 1)
	go func() {
		_, err := c.Fetch(leaderCtx, "k", time.Minute, redistest.Constant("v"))
		done <- err
	}()
	redistest.Eventually(t, "the leader's look", func() bool { return looks.Load() > 0 })
	v, err := c.Fetch(context.Background(), "k", time.Minute, redistest.Constant("v"))
	if err != nil || v != "v" {
		t.Fatalf("follower: Fetch = %q, %v; want v", v, err)
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: Fetch = %v; want context.Canceled", err)
	}
	if k := retriedKind.Load(); k != script.Locked {
		t.Errorf("the follower's look got reply %d; want %d (the lock, free)", k, script.Locked)
	}
	if n := c.Stats().Takeovers; n != 0 {
		t.Errorf("%d takeovers of this process's own lock", n)
	}
}

// TestScriptLookFailedKeepsItsError: a first look with the lock script
// whose reply was lost (it may have taken the lock) fails with that error,
// for its caller and the flight, even if the caller's ctx ends while the
// lock is being released: only a caller that had left when the look
// failed makes the others start over.
func TestScriptLookFailedKeepsItsError(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	script.Fetch.Load(t.Context(), rdb)
	c := New[string](rdb, prefix(t))
	defer c.Close()
	c.looks.score.Store(lookMax)
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	errLost := errors.New("reply lost")
	returned := make(chan struct{}) // closed once Fetch returned
	onRelease := func(cmds ...redis.Cmder) {
		for _, cmd := range cmds {
			if scriptOf(cmd) == script.Release.Hash() {
				leave() // while the release is under way: the rollback stops waiting for it
				select {
				case <-returned:
				case <-time.After(5 * time.Second):
				}
			}
		}
	}
	rdb.AddHook(redistest.Hook{
		Process: func(hctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if scriptOf(cmd) == script.Fetch.Hash() {
				_ = next(hctx, cmd)
				cmd.SetErr(errLost)
				return errLost
			}
			return next(hctx, cmd)
		},
		Before: onRelease,
	})
	_, err := c.Fetch(ctx, "k", time.Minute, redistest.NoCompute[string])
	close(returned)
	if !errors.Is(err, errLost) {
		t.Errorf("Fetch = %v; want the look's error, %v", err, errLost)
	}
}

// TestLeaderPanicEndsFlight: a panic in the first caller's look (a client
// hook's) ends its flight before it goes on up, so that a program that
// recovers finds the key's next Fetch answered, not joined to a flight
// that nobody ends.
func TestLeaderPanicEndsFlight(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	var armed atomic.Bool
	armed.Store(true)
	rdb.AddHook(redistest.Hook{
		Process: func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
			if cmd.Name() == "get" && armed.CompareAndSwap(true, false) {
				panic("hook")
			}
			return next(ctx, cmd)
		},
	})
	c := New[string](rdb, prefix(t))
	defer c.Close()
	func() {
		defer func() {
			if p := recover(); p != "hook" {
				t.Errorf("recovered %v; want the hook's panic", p)
			}
		}()
		_, _ = c.Fetch(context.Background(), "k", time.Minute, redistest.Constant("v"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if v, err := c.Fetch(ctx, "k", time.Minute, redistest.Constant("v")); err != nil || v != "v" {
		t.Errorf("the next Fetch = %q, %v; want v", v, err)
	}
}

// scriptOf returns the SHA1 of the script cmd runs (EVAL or EVALSHA), or "".
func scriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	switch cmd.Name() {
	case "evalsha":
		return s
	case "eval":
		h := sha1.Sum([]byte(s))
		return hex.EncodeToString(h[:])
	}
	return ""
}

// TestScriptLookRedisKilled: with the server dead, a first look with the
// lock script fails as a GET would: an error and no compute, or, with
// WithComputeWhenDown, a compute of its own.
func TestScriptLookRedisKilled(t *testing.T) {
	s := redistest.StartServer(t)
	c := New[int](s.NoRetryClient(t))
	defer c.Close()
	open := New[int](s.NoRetryClient(t), WithComputeWhenDown())
	defer open.Close()
	c.looks.score.Store(lookMax)
	open.looks.score.Store(lookMax)
	s.Kill()
	computed := false
	_, err := c.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) {
		computed = true
		return 5, nil
	})
	if err == nil || computed {
		t.Errorf("Fetch with Redis down: err = %v, computed = %v; want an error, no compute", err, computed)
	}
	if v, err := open.Fetch(t.Context(), "k", time.Minute, func(context.Context) (int, error) { return 6, nil }); err != nil || v != 6 {
		t.Errorf("Fetch WithComputeWhenDown = %v, %v; want 6, nil", v, err)
	}
	if !c.looks.script() || !open.looks.script() {
		t.Error("a failed look moved the Cache off the script look (it is not scored)")
	}
}

// TestWrongTypeIsAMissOverwritten: a value key that holds another type
// than a string (a list, a hash: written by something else under the
// prefix) is a miss, as bytes that do not decode are, for Get, Fetch and
// FetchMany, whatever reads it (a GET, the lock script, a GET with its
// PTTL, a near tier's tracked read); the compute's store overwrites it, and
// the next Fetch hits. Before, every call failed with WRONGTYPE and none
// computed.
func TestWrongTypeIsAMissOverwritten(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	for _, mode := range []struct {
		name   string
		opts   []Option
		script bool // first looks with the lock script (see looks in core.go)
	}{
		{"get", nil, false},
		{"script", nil, true},
		{"stale", []Option{WithStale(time.Minute)}, false},
		{"near", []Option{WithNearCache(100), withNear(nearTest())}, false},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			c := New[string](rdb, append([]Option{prefix(t)}, mode.opts...)...)
			defer c.Close()
			if mode.script {
				c.looks.score.Store(lookMax)
			}
			foreign := func(k string) {
				t.Helper()
				if err := rdb.HSet(ctx, c.valueKey(k), "f", "v").Err(); err != nil {
					t.Fatal(err)
				}
				if err := rdb.LPush(ctx, c.valueKey(k+"-list"), "v").Err(); err != nil {
					t.Fatal(err)
				}
			}
			foreign("get")
			if _, err := c.Get(ctx, "get"); !errors.Is(err, ErrMiss) || c.Stats().DecodeErrors != 1 {
				t.Errorf("Get of a hash = %v (DecodeErrors %d); want ErrMiss, counted", err, c.Stats().DecodeErrors)
			}
			foreign("fetch")
			for _, k := range []string{"fetch", "fetch-list"} {
				if v, err := c.Fetch(ctx, k, time.Minute, redistest.Constant("computed")); err != nil || v != "computed" {
					t.Errorf("Fetch of a %s = %q, %v; want it computed", k, v, err)
				}
				if v, err := c.Fetch(ctx, k, time.Minute, redistest.NoCompute[string]); err != nil || v != "computed" {
					t.Errorf("second Fetch of %s = %q, %v; want the stored value", k, v, err)
				}
			}
			foreign("many")
			keys := []string{"many", "many-list"}
			m, err := c.FetchMany(ctx, keys, time.Minute, func(_ context.Context, missing []string) (map[string]string, error) {
				out := map[string]string{}
				for _, k := range missing {
					out[k] = "computed"
				}
				return out, nil
			})
			if err != nil || m["many"] != "computed" || m["many-list"] != "computed" {
				t.Errorf("FetchMany of a hash and a list = %v, %v; want both computed", m, err)
			}
			for _, k := range append(keys, "fetch", "fetch-list") {
				if typ, err := rdb.Type(ctx, c.valueKey(k)).Result(); err != nil || typ != "string" {
					t.Errorf("%s holds a %s (%v) after its compute; want a string", k, typ, err)
				}
			}
		})
	}
}
