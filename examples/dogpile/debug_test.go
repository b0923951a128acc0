package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestDebugPageWhileRunning: with -debug, the dogpile mode serves the
// library's debug page while it runs, with its Cache's keys as the calls
// name them ("k0", not the Redis key), stops serving it when the run ends,
// and prints the hot keys at the end.
func TestDebugPageWhileRunning(t *testing.T) {
	t.Parallel()
	cfg := smallConfig(redistest.StartServer(t).Addr())
	cfg.JSON = false
	cfg.Duration = 2 * time.Second
	cfg.Debug = freeAddr(t)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), cfg, &out) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	var page struct {
		Caches []struct {
			Prefix  string
			HotKeys []struct{ Key string }
		}
	}
	redistest.Eventually(t, "the debug page to show the Cache's keys", func() bool {
		resp, err := client.Get("http://" + cfg.Debug + "/debug/dogpile?format=json")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&page) == nil && len(page.Caches) == 1 && len(page.Caches[0].HotKeys) > 0
	})
	if c := page.Caches[0]; !strings.HasSuffix(c.Prefix, ":dogpile:") || !strings.HasPrefix(c.HotKeys[0].Key, "k") {
		t.Errorf("the page shows prefix %q and keys %+v; want the mode's prefix and keys k0, k1", c.Prefix, c.HotKeys)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if _, err := client.Get("http://" + cfg.Debug + "/"); err == nil {
		t.Error("the debug page is still served after the run")
	}
	text := out.String()
	if !strings.Contains(text, "dogpile: hot keys") || !strings.Contains(text, "  k0 ") || !strings.Contains(text, "  k1 ") {
		t.Errorf("the output lacks the hot keys k0 and k1:\n%s", text)
	}
}

// freeAddr returns a local address no one listens on (for a moment).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestLoadReportsEveryHotKey: a process reports every key's counts, not
// only its top few, so that the parent's sums over processes leave no
// process out of a key's figures (a key sixth in one process and fifth in
// the fleet would lose that process's reads).
func TestLoadReportsEveryHotKey(t *testing.T) {
	t.Parallel()
	conn, err := demo.Connect(t.Context(), redistest.StartServer(t).Addr(), "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const keys = hotKeysShown + 2
	r, err := load(t.Context(), conn, task{Prefix: t.Name() + ":", Mode: "dogpile", Goroutines: 4, Keys: keys,
		Compute: 10 * time.Millisecond, TTL: time.Second, Duration: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.HotKeys) != keys {
		t.Errorf("the process reports %d hot keys: %+v; want all %d", len(r.HotKeys), r.HotKeys, keys)
	}
}
