package dogpile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// TestReadmeACL creates the user of README.md's "ACL SETUSER" line and
// runs, as that user, every path of the cache (its near tier, waiters woken
// by push, a failed compute, stale and early refresh, not-found) and every
// lock, on a server and on a Cluster. Redis's ACL LOG, which records every
// command, key and channel refused (scripts' commands included), must then
// be empty: a path that fell back silently (polling, the near tier off)
// would leave an entry.
func TestReadmeACL(t *testing.T) {
	var acl []string
	for _, b := range fencedBlocks(t, "README.md", "```") {
		if strings.HasPrefix(b, "ACL SETUSER ") {
			acl = strings.Fields(b)
		}
	}
	if len(acl) < 5 || acl[3] != "on" || !strings.HasPrefix(acl[4], ">") {
		t.Fatalf("README.md has no line \"ACL SETUSER <user> on >password ...\": %q", acl)
	}
	user, password := acl[2], acl[4][1:]
	args := make([]any, len(acl))
	for i, a := range acl {
		args[i] = a
	}
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		s := redistest.StartServer(t)
		admin := s.Client(t)
		setUser(t, admin, args)
		app := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: user, Password: password})
		t.Cleanup(func() { _ = app.Close() })
		exercise(t, app, []*redis.Client{admin})
		checkACLLog(t, admin)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.StartCluster(t, 3)
		var admins []*redis.Client
		for _, addr := range c.Addrs() {
			admin := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { _ = admin.Close() })
			setUser(t, admin, args)
			admins = append(admins, admin)
		}
		app := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), Username: user, Password: password})
		t.Cleanup(func() { _ = app.Close() })
		exercise(t, app, admins)
		for _, admin := range admins {
			checkACLLog(t, admin)
		}
	})
}

func setUser(t *testing.T, admin *redis.Client, args []any) {
	t.Helper()
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := admin.Do(t.Context(), "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
}

// checkACLLog fails with every refusal Redis logged.
func checkACLLog(t *testing.T, admin *redis.Client) {
	t.Helper()
	entries, err := admin.Do(t.Context(), "ACL", "LOG").Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the README's ACL refused: %v", e)
	}
}

// exercise runs every path of the cache and the locks as app; admins are
// the servers' default users, which see who subscribes.
func exercise(t *testing.T, app redis.UniversalClient, admins []*redis.Client) {
	ctx := t.Context()
	exerciseCache(t, ctx, app, admins)
	exerciseLocks(t, ctx, app, admins)
}

// subscribed returns whether any server has a subscriber on a channel
// matching pattern, plain or sharded.
func subscribed(t *testing.T, admins []*redis.Client, pattern string) func() bool {
	return func() bool {
		for _, admin := range admins {
			for _, cmd := range []string{"CHANNELS", "SHARDCHANNELS"} {
				chans, err := admin.Do(t.Context(), "PUBSUB", cmd, pattern).StringSlice()
				if err != nil {
					t.Fatal(err)
				}
				if len(chans) > 0 {
					return true
				}
			}
		}
		return false
	}
}

func exerciseCache(t *testing.T, ctx context.Context, app redis.UniversalClient, admins []*redis.Client) {
	t.Helper()
	a := dogpile.New[string](app, dogpile.WithNearCache(100), dogpile.WithNearTest(), dogpile.WithStale(time.Minute),
		dogpile.WithEarlyRefresh(1), dogpile.WithNegativeTTL(time.Minute), dogpile.WithCompression(8))
	b := dogpile.New[string](app) // another process: its own flights
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	value := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return v, nil }
	}
	// A slow compute in a, and b waits for it: b subscribes, a publishes.
	release := make(chan struct{})
	var wg sync.WaitGroup
	done := sync.OnceFunc(func() { close(release); wg.Wait() })
	defer done() // also when a check below fails: Close waits for this compute
	wg.Go(func() {
		slow := func(ctx context.Context) (string, error) {
			select {
			case <-release:
				return "v", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		if _, err := a.Fetch(ctx, "k", time.Minute, slow); err != nil {
			t.Errorf("Fetch as the computing process: %v", err)
		}
	})
	redistest.Eventually(t, "a's compute lock", func() bool { return a.Stats().Computes == 1 })
	wg.Go(func() {
		if v, err := b.Fetch(ctx, "k", time.Minute, value("b computed")); err != nil || v != "v" {
			t.Errorf("Fetch as a waiting process = %q, %v; want v", v, err)
		}
	})
	redistest.Eventually(t, "b to subscribe to k's wake-ups", subscribed(t, admins, "*{k}*"))
	done()
	// The near tier: a hit from memory once tracking is up.
	redistest.Eventually(t, "a near hit", func() bool {
		if _, err := a.Fetch(ctx, "k", time.Minute, value("x")); err != nil {
			t.Fatal(err)
		}
		return a.Stats().NearHits > 0
	})
	if a.Stats().NearOff {
		t.Error("the near tier turned off")
	}
	cacheCalls(t, ctx, a, value)
}

// cacheCalls runs the cache's other calls: a failed compute, not found,
// Set, Get, Delete, Refresh, FetchMany, tags, Clear.
func cacheCalls(t *testing.T, ctx context.Context, a *dogpile.Cache[string], value func(string) func(context.Context) (string, error)) {
	t.Helper()
	boom := errors.New("boom")
	if _, err := a.Fetch(ctx, "failing", time.Minute, func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("Fetch of a failing compute: %v; want boom", err)
	}
	if _, err := a.Fetch(ctx, "absent", time.Minute, func(context.Context) (string, error) { return "", dogpile.ErrNotFound }); !errors.Is(err, dogpile.ErrNotFound) {
		t.Errorf("Fetch of an absent key: %v; want ErrNotFound", err)
	}
	if err := a.Set(ctx, "s", "set", time.Minute); err != nil {
		t.Errorf("Set: %v", err)
	}
	if v, err := a.Get(ctx, "s"); err != nil || v != "set" {
		t.Errorf("Get = %q, %v", v, err)
	}
	if err := a.Delete(ctx, "s"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := a.Refresh(ctx, "k", 50*time.Millisecond, value("refreshed")); err != nil {
		t.Errorf("Refresh: %v", err)
	}
	// k is due for its early refresh now: a background refresh runs.
	redistest.Eventually(t, "a background refresh", func() bool {
		if _, err := a.Fetch(ctx, "k", time.Minute, value("again")); err != nil {
			t.Fatal(err)
		}
		return a.Stats().Refreshes > 0
	})
	keys := []string{"m1", "m2", "m3", "k"}
	got, err := a.FetchMany(ctx, keys, time.Minute, func(_ context.Context, missing []string) (map[string]string, error) {
		out := map[string]string{}
		for _, k := range missing {
			out[k] = "many"
		}
		return out, nil
	})
	if err != nil || len(got) != len(keys) {
		t.Errorf("FetchMany = %v, %v; want %d values", got, err, len(keys))
	}
	tagged := func(ctx context.Context) (string, error) {
		dogpile.Tag(ctx, "team")
		return "tagged, and long enough to be compressed", nil
	}
	if _, err := a.Fetch(ctx, "t1", time.Minute, tagged); err != nil {
		t.Errorf("Fetch with a tag: %v", err)
	}
	if err := a.SetTagged(ctx, "t2", "set with a tag", time.Minute, "team"); err != nil {
		t.Errorf("SetTagged: %v", err)
	}
	if err := a.InvalidateTag(ctx, "team"); err != nil {
		t.Errorf("InvalidateTag: %v", err)
	}
	if err := a.Clear(ctx); err != nil {
		t.Errorf("Clear: %v", err)
	}
}

func exerciseLocks(t *testing.T, ctx context.Context, app redis.UniversalClient, admins []*redis.Client) {
	t.Helper()
	contend(t, ctx, admins, "plain", lock.NewMutex(app, "plain").Lock)
	contend(t, ctx, admins, "fair", lock.NewMutex(app, "fair", lock.WithFair()).Lock)
	sem := lock.NewSemaphore(app, "sem", 1)
	contend(t, ctx, admins, "sem", func(ctx context.Context) (*lock.Lease, error) { return sem.Acquire(ctx, 1) })
	rw := lock.NewRWMutex(app, "rw")
	contend(t, ctx, admins, "rw", rw.Lock)
	if l, err := rw.RLock(ctx); err != nil || l.Unlock(ctx) != nil {
		t.Errorf("RLock: %v", err)
	}
	multi := lock.NewMultiMutex(app, []string{"m-a", "m-b", "m-c"})
	contend(t, ctx, admins, "m-", multi.Lock)
	red := lock.NewRedlock([]redis.UniversalClient{app}, "red")
	if l, err := red.Lock(ctx); err != nil || l.Unlock(ctx) != nil {
		t.Errorf("Redlock: %v", err)
	}
	err := lock.Do(ctx, app, "do", func(ctx context.Context, l *lock.Lease) error {
		if l.Fence() <= 0 {
			return fmt.Errorf("fence %d", l.Fence())
		}
		return nil
	}, lock.WithAutoExtend())
	if err != nil {
		t.Errorf("lock.Do: %v", err)
	}
}

// contend holds a lock with acquire while a second acquire waits for it,
// so that the waiter subscribes (to a channel with name in its hash tag)
// and the release publishes.
func contend(t *testing.T, ctx context.Context, admins []*redis.Client, name string, acquire func(context.Context) (*lock.Lease, error)) {
	t.Helper()
	first, err := acquire(ctx)
	if err != nil {
		t.Errorf("acquire: %v", err)
		return
	}
	got := make(chan error, 1)
	go func() {
		l, err := acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	redistest.Eventually(t, "a waiter on "+name, subscribed(t, admins, "*{"+name+"*"))
	if err := first.Unlock(ctx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Errorf("the waiting acquire: %v", err)
	}
}
