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

// TestUncontendedPairCommands: an uncontended Lock+Unlock costs Redis at
// most 7 commands, counted by the server (the two scripts and what they
// call), and publishes nothing when nobody waits.
func TestUncontendedPairCommands(t *testing.T) {
	const pairs = 100
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	m := lock.NewMutex(rdb, "lean")
	warm, err := m.Lock(ctx) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	warm.Unlock(ctx)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for range pairs {
		l, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	calls := commandStats(t, rdb.Info(ctx, "commandstats").Val())
	total := int64(0)
	for name, n := range calls {
		if name != "config|resetstat" && name != "info" {
			total += n
		}
	}
	// EVALSHA, TIME and SET ... GET (the fence: never below the clock,
	// so that it survives a failover), SET NX; EVALSHA, GET, DEL.
	if per := float64(total) / pairs; per > 7 {
		t.Errorf("%.2f server commands per Lock+Unlock (%v); want <= 7", per, calls)
	}
	if calls["publish"] != 0 {
		t.Errorf("%d PUBLISH for %d releases nobody waited for; want 0", calls["publish"], pairs)
	}
	t.Logf("per pair: %v / %d", calls, pairs)
}
