package breaker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/internal/redisutil"
)

// TestOutageLoggedOncePerLogger: an outage is logged once when it begins
// and once when it ends, to every logger attached (one attached twice logs
// once), whichever call saw the change, and failed probes log nothing more
// within the minute (issue 20: a line per failed probe, and a start line
// lost when the call that opened the circuit had no logger).
func TestOutageLoggedOncePerLogger(t *testing.T) {
	b := New(nil)
	var one, two redistest.SyncBuffer
	l1, l2 := slog.New(slog.NewTextHandler(&one, nil)), slog.New(slog.NewTextHandler(&two, nil))
	b.AddLogger(l1)
	b.AddLogger(l2)
	b.AddLogger(l1)
	done, _ := b.Allow(context.Background())
	done(io.EOF) // a call without a logger of its own opens the circuit
	for range 3 {
		time.Sleep(cooldown + 10*time.Millisecond)
		if probe, err := b.Allow(context.Background()); err == nil {
			probe(io.ErrUnexpectedEOF) // a failed probe
		}
	}
	runtime.GC() // what made CI lose l2's end line, now every run
	time.Sleep(cooldown + 10*time.Millisecond)
	probe, err := b.Allow(context.Background())
	if err != nil {
		t.Fatalf("Allow after the cooldown = %v", err)
	}
	probe(nil)
	// The breaker holds its loggers weakly: without this, a GC during the
	// sleeps above may drop l2 (the test's last use of it was AddLogger),
	// and its end line with it (CI, 2026-11-29).
	runtime.KeepAlive(l1)
	runtime.KeepAlive(l2)
	for name, buf := range map[string]*redistest.SyncBuffer{"first": &one, "second": &two} {
		out := buf.String()
		if n := strings.Count(out, "redis unreachable"); n != 1 || !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "EOF") {
			t.Errorf("%s logger: %d start lines (want 1, an ERROR naming the error):\n%s", name, n, out)
		}
		if n := strings.Count(out, "redis reachable again"); n != 1 || !strings.Contains(out, "down=") {
			t.Errorf("%s logger: %d end lines (want 1, with the outage's length):\n%s", name, n, out)
		}
		if n := strings.Count(out, "\n"); n != 2 {
			t.Errorf("%s logger: %d lines; want 2:\n%s", name, n, out)
		}
	}
}

// TestOutageLogDropsCollectedLogger: the breaker outlives the caches and
// locks of its client, so it holds their loggers weakly; a logger nothing
// else holds is dropped, not written to for the life of the program.
func TestOutageLogDropsCollectedLogger(t *testing.T) {
	b := New(nil)
	var kept, dropped redistest.SyncBuffer
	l := slog.New(slog.NewTextHandler(&kept, nil))
	b.AddLogger(l)
	b.AddLogger(slog.New(slog.NewTextHandler(&dropped, nil)))
	runtime.GC()
	done, _ := b.Allow(context.Background())
	done(io.EOF)
	runtime.KeepAlive(l)
	if !strings.Contains(kept.String(), "redis unreachable") {
		t.Errorf("the logger still held: %q; want the start line", kept.String())
	}
	if dropped.String() != "" {
		t.Errorf("the collected logger wrote %q; want nothing", dropped.String())
	}
}

// TestOutageReminder: a long outage is logged again at most once per
// reminder interval (a minute; 200 ms here), as a WARN with its length so
// far, however many probes fail meanwhile (one every 100 ms here); its end
// is logged once.
func TestOutageReminder(t *testing.T) {
	b := New(nil)
	b.log.remindEvery = 200 * time.Millisecond
	var out redistest.SyncBuffer
	l := slog.New(slog.NewTextHandler(&out, nil))
	defer runtime.KeepAlive(l) // held weakly by the breaker
	b.AddLogger(l)
	done, _ := b.Allow(context.Background())
	done(io.EOF)
	probes := 0
	for start := time.Now(); time.Since(start) < 450*time.Millisecond; {
		time.Sleep(cooldown / 4)
		if probe, err := b.Allow(context.Background()); err == nil {
			probes++
			probe(io.ErrUnexpectedEOF)
		}
	}
	redistest.Eventually(t, "a probe after the cooldown", func() bool {
		probe, err := b.Allow(context.Background())
		if err == nil {
			probe(nil)
		}
		return err == nil
	})
	log := out.String()
	if n := strings.Count(log, "redis still unreachable"); n < 1 || n > 2 || n >= probes || !strings.Contains(log, "level=WARN") {
		t.Errorf("%d reminders over %d failed probes in 450 ms with a 200 ms interval; want 1 or 2 WARN lines:\n%s", n, probes, log)
	}
	if n := strings.Count(log, "redis unreachable;"); n != 1 {
		t.Errorf("%d start lines; want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "redis reachable again"); n != 1 {
		t.Errorf("%d end lines; want 1:\n%s", n, log)
	}
}

// TestDialHookLeavesOwnCommands: the first refused dial after the server
// is killed opens the circuit, at once, not after go-redis's dial retries
// (1.7 s), and the calls the circuit turns away are told which server and
// why; the program's own commands on the client get go-redis's own error
// (issue 39: they got ErrUnavailable). go-redis's pool never counts a
// failed dial, so however many fail, it never stops dialling on its own:
// once the server is back, the program's commands and the breaker's probe
// succeed within a few cooldowns.
func TestDialHookLeavesOwnCommands(t *testing.T) {
	s := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, PoolSize: 2})
	t.Cleanup(func() { _ = rdb.Close() })
	b := For(rdb)
	ctx := t.Context()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	start := time.Now()
	err := rdb.Get(ctx, "k").Err()
	if took := time.Since(start); err == nil || errors.Is(err, ErrUnavailable) || !redisutil.NeverSent(err) {
		t.Fatalf("the program's GET after the kill = %v after %v; want go-redis's dial error", err, took)
	}
	redistest.Eventually(t, "the refused dial to open the circuit", b.Open)
	if _, err := b.Allow(ctx); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), s.Addr()+": dial") {
		t.Fatalf("a call with the circuit open = %v; want ErrUnavailable naming %s and its dial error", err, s.Addr())
	}
	for range 50 { // many more than PoolSize: go-redis would stop dialling
		if err := rdb.Get(ctx, "k").Err(); errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("the program's GET while down = %v; want go-redis's dial error", err)
		}
	}
	s.Restart()
	back := time.Now()
	redistest.Eventually(t, "the program's GET to succeed after the restart", func() bool {
		return errors.Is(rdb.Get(ctx, "k").Err(), redis.Nil)
	})
	t.Logf("the program's first GET %v after the server answered again", time.Since(back))
	redistest.Eventually(t, "the breaker's probe to succeed", func() bool {
		done, err := b.Allow(ctx)
		if err == nil {
			done(nil)
		}
		return err == nil
	})
	if b.Open() {
		t.Error("circuit still open after a successful probe")
	}
}
