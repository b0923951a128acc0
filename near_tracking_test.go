package dogpile_test

// The near tier's tracking under faults: a dropped or silent tracking
// connection, a server that refuses tracking, forged or missing
// invalidations, and the events the observer hears of them.

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/near"
	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// TestNearCacheDroppedTracking: when the tracking connection is killed, the
// near tier is flushed and bypassed until tracking is back, so a write made
// while it was down is seen at once, and never the value it replaced.
func TestNearCacheDroppedTracking(t *testing.T) {
	for _, kill := range []struct{ name, filter string }{
		{"pubsub", "TYPE pubsub"},
		{"tracking", "ID"}, // found in CLIENT LIST by its tracking flag
	} {
		t.Run(kill.name, func(t *testing.T) {
			s := redistest.StartServer(t)
			admin := s.Client(t)
			a := dogpile.NewNearCache[string](t, s.Client(t), 100)
			b := dogpile.New[string](s.Client(t), prefix(t))
			ctx := t.Context()
			gate := make(chan struct{})
			dogpile.Tracker(a).BeforeSession = func() { <-gate }
			if err := b.Set(ctx, "k", "v1", time.Minute); err != nil {
				t.Fatal(err)
			}
			dogpile.FetchNear(t, a, "k")
			flushes := a.Stats().NearFlushes
			args := []any{"CLIENT", "KILL"}
			for _, f := range strings.Fields(kill.filter) {
				args = append(args, f)
			}
			if kill.filter == "ID" {
				args = append(args, trackingClientID(t, admin))
			}
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Fatal(err)
			}
			redistest.Eventually(t, "the flush", func() bool { return a.Stats().NearFlushes > flushes })
			if err := b.Set(ctx, "k", "v2", time.Minute); err != nil { // while tracking is down
				t.Fatal(err)
			}
			hits := a.Stats().NearHits
			for range 20 {
				if v := dogpile.FetchValue(t, a, "k"); v != "v2" {
					t.Fatalf("Fetch while tracking is down = %q; want v2", v)
				}
			}
			if n := a.Stats().NearHits - hits; n != 0 {
				t.Errorf("%d near hits while tracking was down; want 0", n)
			}
			close(gate)
			if v := dogpile.FetchNear(t, a, "k"); v != "v2" {
				t.Fatalf("near hit after tracking is back = %q; want v2", v)
			}
		})
	}
}

// trackingClientID finds the subscriber of a near tier's tracking session:
// the connection with tracking on (flag t) that is subscribed (flag P).
func trackingClientID(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	for _, c := range tracked(t, rdb) {
		if strings.Contains(c["flags"], "P") {
			return c["id"]
		}
	}
	t.Fatalf("no tracking subscriber in CLIENT LIST")
	return ""
}

// tracked lists the connections of a server with tracking on, each as its
// CLIENT LIST fields.
func tracked(t *testing.T, rdb *redis.Client) []map[string]string {
	t.Helper()
	list, err := rdb.ClientList(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for line := range strings.Lines(list) {
		c := make(map[string]string)
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				c[k] = v
			}
		}
		if strings.Contains(c["flags"], "t") {
			out = append(out, c)
		}
	}
	return out
}

// TestNearCacheDegrades: miniredis cannot track keys, so the near tier is
// off: every Fetch reads Redis, which is said once.
func TestNearCacheDegrades(t *testing.T) {
	rdb := redistest.Embedded(t)
	var buf redistest.SyncBuffer
	a := dogpile.NewNearCache[string](t, rdb, 100, dogpile.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	ctx := t.Context()
	if err := a.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "NearOff", func() bool {
		if v := dogpile.FetchValue(t, a, "k"); v != "v1" {
			t.Fatalf("Fetch = %q; want v1", v)
		}
		return a.Stats().NearOff
	})
	redistest.Eventually(t, "the log line", func() bool { return strings.Contains(buf.String(), "near cache off") }) // logged after NearOff is set
	if err := rdb.Del(ctx, dogpile.KeysOf(a, "k").Value).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Fetch(ctx, "k", time.Minute, redistest.Constant("v2")); err != nil || v != "v2" {
		t.Fatalf("Fetch after a raw DEL = %q, %v; want v2", v, err)
	}
	if s := a.Stats(); s.NearHits != 0 {
		t.Errorf("NearHits = %d on miniredis; want 0", s.NearHits)
	}
	if n := strings.Count(buf.String(), "near cache off"); n != 1 {
		t.Errorf("logged %d times; want once:\n%s", n, buf.String())
	}
}

// TestNearCacheSilentServer: a server that stops answering (SIGSTOP: no
// error, no closed connection) is noticed by the unanswered ping, and the
// tier is flushed before it answers again.
func TestNearCacheSilentServer(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	if err := a.Set(t.Context(), "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")
	flushes := a.Stats().NearFlushes
	s.Pause()
	redistest.Eventually(t, "the flush while the server is silent", func() bool {
		dogpile.Tracker(a).Use(near.Now()) // in use (a Fetch would block once the tier is off)
		return a.Stats().NearFlushes > flushes
	})
	s.Resume()
	if v := dogpile.FetchNear(t, a, "k"); v != "v1" {
		t.Fatalf("near hit after the server came back = %q; want v1", v)
	}
}

// TestNearCacheInvalidateEvents: the observer hears of each key Redis
// invalidates, a raw SET by another client included, and of the flush when
// the tracking connection drops (Key empty); a key with a brace is named by
// its Redis key.
func TestNearCacheInvalidateEvents(t *testing.T) {
	srv := redistest.StartServer(t)
	var mu sync.Mutex
	var keys []string
	a := dogpile.NewNearCache[string](t, srv.Client(t), 100, dogpile.WithObserver(func(_ context.Context, e dogpile.Event) context.Context {
		if e.Kind == dogpile.EventInvalidate {
			mu.Lock()
			keys = append(keys, e.Key)
			mu.Unlock()
		}
		return nil
	}))
	heard := func(k string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(keys, k) }
	}
	b := dogpile.New[string](srv.Client(t), prefix(t))
	ctx := t.Context()
	for _, k := range []string{"k", "a{b}"} {
		if err := b.Set(ctx, k, "v1", time.Minute); err != nil {
			t.Fatal(err)
		}
		dogpile.FetchNear(t, a, k)
	}
	if err := b.Set(ctx, "k", "v2", time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the invalidation of k", heard("k"))
	raw := srv.Client(t)
	if err := raw.Del(ctx, redisutil.Key(t.Name()+":", "a{b}")).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the invalidation of a{b}", heard(redisutil.Key(t.Name()+":", "a{b}")))
	dogpile.FetchNear(t, a, "k")
	if err := raw.Do(ctx, "CLIENT", "KILL", "ID", trackingClientID(t, raw)).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the flush", heard(""))
}

// TestNearCacheForgedInvalidations: a client that PUBLISHes to the
// invalidation channel flushes no near tier (issue 27: 5 publishes gave 5
// flushes) and removes no key: Redis's own invalidations are arrays of
// keys, which a PUBLISH cannot send.
func TestNearCacheForgedInvalidations(t *testing.T) {
	s := redistest.StartServer(t)
	a := dogpile.NewNearCache[string](t, s.Client(t), 100)
	raw := s.Client(t)
	ctx := t.Context()
	if err := a.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(ctx, "marker", "m", time.Minute); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchNear(t, a, "k")
	dogpile.FetchNear(t, a, "marker") // read: Redis reports its writes
	before := a.Stats()
	for _, payload := range []string{"x", "", dogpile.KeysOf(a, "k").Value, "*", dogpile.KeysOf(a, "k").Value} {
		if err := raw.Publish(ctx, "__redis__:invalidate", payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A real write after the publishes: once its invalidation is applied,
	// so were the messages before it (one connection, in order).
	if err := raw.Set(ctx, dogpile.KeysOf(a, "marker").Value, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the marker's invalidation", func() bool { return a.Stats().NearInvalidations > before.NearInvalidations })
	if s := a.Stats(); s.NearFlushes != before.NearFlushes || s.NearInvalidations != before.NearInvalidations+1 {
		t.Errorf("after 5 forged messages: %d flushes, %d invalidations; want %d, %d",
			s.NearFlushes, s.NearInvalidations, before.NearFlushes, before.NearInvalidations+1)
	}
	if !dogpile.NearHas(a, "k") {
		t.Error("a forged message removed k from the near tier")
	}
}

// TestNearCacheACLWithoutChannels: a Redis 7 ACL user allowed the cache's
// own channels (its wake-ups) but not the invalidation channel (Redis 7's
// default is resetchannels) cannot receive invalidations: the tier turns
// off once, logged and in Stats.NearOff, instead of reconnecting for ever
// with nothing said (issue 27).
func TestNearCacheACLWithoutChannels(t *testing.T) {
	s := redistest.StartServer(t)
	ctx := t.Context()
	channels := "&" + t.Name() + ":*"
	if err := s.Client(t).Do(ctx, "ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "resetchannels", channels).Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "secret"})
	t.Cleanup(func() { _ = rdb.Close() })
	var buf redistest.SyncBuffer
	a := dogpile.NewNearCache[string](t, rdb, 100, dogpile.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err := a.Set(ctx, "k", "v1", time.Minute); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "NearOff", func() bool {
		if v := dogpile.FetchValue(t, a, "k"); v != "v1" {
			t.Fatalf("Fetch = %q; want v1", v)
		}
		return a.Stats().NearOff
	})
	redistest.Eventually(t, "the log line", func() bool { return strings.Contains(buf.String(), "near cache off") }) // logged after NearOff is set
	if n := strings.Count(buf.String(), "near cache off"); n != 1 || !strings.Contains(buf.String(), "NOPERM") {
		t.Errorf("logged %d times, or without the server's reason; want once, with NOPERM:\n%s", n, buf.String())
	}
	if s := a.Stats(); s.NearHits != 0 {
		t.Errorf("NearHits = %d without invalidations; want 0", s.NearHits)
	}
}
