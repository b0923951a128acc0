package dogpile

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// TestMaxValueSizeBeforeCompression: WithMaxValueSize counts a value before
// compression, at the store and at the read alike. A value above it that
// compresses below it is refused by Set (ErrInvalid, naming its size), and
// each Fetch returns the computed value with that error, storing nothing;
// one within it is stored compressed and read back, and 5 Fetches compute
// once. Before, the store counted the compressed size and the read the
// decompressed one: Set stored 19 bytes that every read refused, and every
// Fetch computed again and returned an empty value.
func TestMaxValueSizeBeforeCompression(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	big := strings.Repeat("a", 5000) // 5,006 bytes as an entry; S2 makes it about 20
	var computes atomic.Int64
	compute := func(context.Context) (string, error) {
		computes.Add(1)
		return big, nil
	}

	c := New[string](rdb, prefix(t), WithCompression(16), WithMaxValueSize(1000))
	defer c.Close()
	err := c.Set(ctx, "k", big, time.Minute)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "value of 5006 bytes is above the limit of 1000") {
		t.Errorf("Set of a value above the limit that compresses below it = %v; want ErrInvalid naming 5006 bytes", err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, ErrMiss) || c.Stats().DecodeErrors != 0 {
		t.Errorf("Get after the refused Set = %v (DecodeErrors %d); want a plain miss: nothing stored", err, c.Stats().DecodeErrors)
	}
	for i := range 5 {
		v, err := c.Fetch(ctx, "f", time.Minute, compute)
		if v != big || !errors.Is(err, ErrInvalid) {
			t.Errorf("Fetch %d = %d bytes, %v; want the computed value with ErrInvalid", i, len(v), err)
		}
	}
	if n, err := rdb.Exists(ctx, c.valueKey("k"), c.valueKey("f")).Result(); err != nil || n != 0 {
		t.Errorf("keys stored above the limit: %d, %v; want none", n, err)
	}

	computes.Store(0)
	fits := New[string](rdb, prefix(t), WithCompression(16), WithMaxValueSize(6000))
	defer fits.Close()
	for i := range 5 {
		if v, err := fits.Fetch(ctx, "g", time.Minute, compute); v != big || err != nil {
			t.Errorf("Fetch %d within the limit = %d bytes, %v; want the value", i, len(v), err)
		}
	}
	if n := computes.Load(); n != 1 {
		t.Errorf("5 Fetches within the limit computed %d times; want 1", n)
	}
	if b, err := rdb.Get(ctx, fits.valueKey("g")).Bytes(); err != nil || len(b) > 100 {
		t.Errorf("stored %d bytes, %v; want the value compressed", len(b), err)
	}
}

// TestMaxValueSizeClaimNotAllocated: a compressed entry that claims to
// decompress to 60 MiB (S2's length prefix, then 3 bytes) is a miss for
// Get, Fetch and FetchMany, refused before anything is allocated for it:
// the reads together allocate far less than one such value.
func TestMaxValueSizeClaimNotAllocated(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	const claim = 60 << 20
	c := New[string](rdb, prefix(t), WithCompression(16), WithMaxValueSize(1<<20))
	defer c.Close()
	bomb := []byte{entry.Magic0, entry.Magic1, entry.FormatMeta, entry.FlagCompressed, 0, 0}
	bomb = append(binary.AppendUvarint(bomb, claim), 0, 0, 0)
	for _, k := range []string{"get", "fetch", "many"} {
		if err := rdb.Set(ctx, c.valueKey(k), bomb, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := c.Get(ctx, "get"); !errors.Is(err, ErrMiss) || !strings.Contains(err.Error(), "above the limit") {
		t.Errorf("Get of the crafted entry = %v; want ErrMiss naming the limit", err)
	}
	if v, err := c.Fetch(ctx, "fetch", time.Minute, constant("v")); v != "v" || err != nil {
		t.Errorf("Fetch of the crafted entry = %q, %v; want it recomputed", v, err)
	}
	m, err := c.FetchMany(ctx, []string{"many"}, time.Minute, func(_ context.Context, keys []string) (map[string]string, error) {
		return map[string]string{"many": "w"}, nil
	})
	if err != nil || m["many"] != "w" {
		t.Errorf("FetchMany of the crafted entry = %v, %v; want it recomputed", m, err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > claim/4 {
		t.Errorf("3 reads of an entry claiming %d MiB allocated %d MiB; want far less", claim>>20, grew>>20)
	}
	if n := c.Stats().DecodeErrors; n < 3 {
		t.Errorf("DecodeErrors = %d; want the 3 crafted entries counted", n)
	}
}
