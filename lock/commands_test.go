package lock_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/dogpile-go/dogpile/internal/redistest"
	"github.com/dogpile-go/dogpile/lock"
)

// commandStats returns the calls of each command from INFO commandstats,
// Lua-internal calls included, keyed by lower-case name.
func commandStats(t *testing.T, info string) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		calls[name] = n
	}
	return calls
}

// TestUncontendedPairCommands: an uncontended Lock+Unlock costs Redis 7
// commands, counted by the server (the two scripts and what they call):
// EVALSHA, TIME and SET ... GET (the fence: never below the clock, so that
// it survives a failover), SET NX; EVALSHA, GET, DEL. It publishes nothing
// when nobody waits, and a Mutex made for each call, as applications make
// them, costs no more: no EVAL, no NOSCRIPT round trip, once the server
// has the scripts.
func TestUncontendedPairCommands(t *testing.T) {
	const pairs = 100
	want := map[string]int64{"evalsha": 2, "time": 1, "set": 2, "get": 1, "del": 1}
	for _, tc := range []struct {
		name    string
		perCall bool
	}{{"one Mutex", false}, {"a NewMutex per call", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.StartServer(t).Client(t)
			ctx := t.Context()
			m := lock.NewMutex(rdb, "lean")
			warm, err := m.Lock(ctx) // loads the scripts
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			for range pairs {
				if tc.perCall {
					m = lock.NewMutex(rdb, "lean")
				}
				l, err := m.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			calls := commandStats(t, rdb.Info(ctx, "commandstats").Val())
			delete(calls, "config|resetstat")
			delete(calls, "info")
			total := int64(0)
			for _, n := range calls {
				total += n
			}
			if per := float64(total) / pairs; per > 7 {
				t.Errorf("%.2f server commands per Lock+Unlock (%v); want <= 7", per, calls)
			}
			for name, n := range calls {
				if n != want[name]*pairs {
					t.Errorf("%d %s for %d Lock+Unlock; want %d", n, name, pairs, want[name]*pairs)
				}
			}
			t.Logf("per pair: %v / %d", calls, pairs)
		})
	}
}
