package dogpile

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

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
				if v, err := c.Fetch(ctx, k, time.Minute, constant("computed")); err != nil || v != "computed" {
					t.Errorf("Fetch of a %s = %q, %v; want it computed", k, v, err)
				}
				if v, err := c.Fetch(ctx, k, time.Minute, nil2[string]); err != nil || v != "computed" {
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
