package dogpile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

type beer struct {
	Name string
	ABV  float64
	Tags []string
}

func TestCodecRoundTrip(t *testing.T) {
	c := New[beer](redistest.NopClient(t))
	for _, v := range []beer{{}, {Name: "Pils", ABV: 4.8}, {Name: "IPA", Tags: []string{"hoppy", ""}}} {
		b, err := c.encode(v)
		if err != nil {
			t.Fatalf("encode(%+v): %v", v, err)
		}
		if !bytes.HasPrefix(b, []byte{'d', 'p', entry.FormatVersion}) {
			t.Errorf("encode(%+v) = %q; want the header dp\\x01 first", v, b)
		}
		got, err := c.decode(b)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", v, got, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	c := New[beer](redistest.NopClient(t))
	for _, b := range []string{"", "d", "dp", "xp\x01\x80", "dp\x02\x80", "dp\x01", "dp\x01\xc1", "dp\x01\x81\xa4Name\x01"} {
		if v, err := c.decode([]byte(b)); err == nil {
			t.Errorf("decode(%q) = %+v, nil; want an error", b, v)
		}
	}
}

// FuzzDecode checks that decoding arbitrary bytes never panics, and that
// whatever decodes encodes and decodes to the same value.
func FuzzDecode(f *testing.F) {
	c := New[beer](redistest.NopClient(f))
	for _, v := range []beer{{Name: "Pils", ABV: 4.8}, {Tags: []string{"a"}}} {
		b, err := c.encode(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("dp\x01\xc1"))
	f.Add([]byte("not ours"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := c.decode(b)
		if err != nil {
			return
		}
		b2, err := c.encode(v)
		if err != nil {
			t.Fatalf("encode(%+v) of a decoded value: %v", v, err)
		}
		v2, err := c.decode(b2)
		if err != nil || !reflect.DeepEqual(v, v2) {
			t.Fatalf("round trip of %+v = %+v, %v", v, v2, err)
		}
	})
}

// oldEntry is what dogpile wrote before the entry format had versions
// beyond 1 (bytes captured from that code): it must still read.
const oldEntry = "dp\x01\x83\xa4Name\xa4Pils\xa3ABV\xcb@\x13333333\xa4Tags\x91\xa5crisp"

func TestEntryReadsOldFormat(t *testing.T) {
	c := New[beer](redistest.NopClient(t))
	v, m, err := c.decodeEntry([]byte(oldEntry))
	want := beer{Name: "Pils", ABV: 4.8, Tags: []string{"crisp"}}
	if err != nil || !reflect.DeepEqual(v, want) || m != (entry.Meta{}) {
		t.Fatalf("decodeEntry(old bytes) = %+v, %+v, %v; want %+v, no meta", v, m, err, want)
	}
	// A value with nothing else to record is still written the old way, so
	// that older processes read it during a rolling deploy.
	b, err := c.encode(want)
	if err != nil || string(b) != oldEntry {
		t.Errorf("encode = %q, %v; want the old bytes %q", b, err, oldEntry)
	}
}

func TestEntryMeta(t *testing.T) {
	c := New[beer](redistest.NopClient(t))
	for _, m := range []entry.Meta{{Took: 150 * time.Millisecond, Early: 170 * time.Millisecond}, {Took: time.Microsecond}, {NotFound: true, Took: 2 * time.Second}} {
		v := beer{Name: "IPA"}
		b, err := c.encodeEntry(v, m)
		if err != nil {
			t.Fatalf("encodeEntry(%+v): %v", m, err)
		}
		if b[2] != entry.FormatMeta {
			t.Errorf("encodeEntry(%+v) wrote version %d; want %d", m, b[2], entry.FormatMeta)
		}
		got, gm, err := c.decodeEntry(b)
		if err != nil || gm != m {
			t.Errorf("decodeEntry(encodeEntry(%+v)) meta = %+v, %v", m, gm, err)
		}
		if !m.NotFound && !reflect.DeepEqual(got, v) {
			t.Errorf("value = %+v; want %+v", got, v)
		}
		if _, err := c.decode(b); m.NotFound == (err == nil) {
			t.Errorf("decode of %+v: err = %v; a tombstone (only) is no value", m, err)
		}
	}
}

func TestEntryUnknownIsAnError(t *testing.T) {
	c := New[beer](redistest.NopClient(t))
	for _, b := range []string{
		"dp\x04\x80",             // a newer version
		"dp\x02\x80\x00\x00\x80", // a flag this code does not know
		"dp\x02\x00\x00",         // one duration missing
		"dp\x02\x01\x00\x00\x80", // a tombstone with a payload
	} {
		_, _, err := c.decodeEntry([]byte(b))
		if err == nil {
			t.Errorf("decodeEntry(%q) succeeded; want an error", b)
		}
	}
	if _, _, err := c.decodeEntry([]byte("dp\x07")); !errors.Is(err, entry.ErrVersion) {
		t.Errorf("decodeEntry of version 7: %v; want entry.ErrVersion", err)
	}
}

// TestEntryNewerIsACountedMiss: bytes that a newer dogpile may write (a
// version or a flag this code does not know) read as a miss counted in
// Stats.DecodeErrors, by Get and by Fetch, on the plain read path and on the
// freshness one (GET and PTTL pipelined): never an error, never a panic.
func TestEntryNewerIsACountedMiss(t *testing.T) {
	s := redistest.StartServer(t)
	ctx := t.Context()
	for _, opts := range [][]Option{nil, {WithStale(time.Minute), WithEarlyRefresh(1)}} {
		c := New[string](s.Client(t), append(opts, prefix(t))...)
		newer := []string{"dp\x04\x80", "dp\x7f", "dp\x02\x80\x00\x00\xa1v"}
		for i, raw := range newer {
			key := fmt.Sprint("k", i)
			if err := c.client.Set(ctx, c.keys(key).Value, raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get(ctx, key); !errors.Is(err, ErrMiss) {
				t.Errorf("Get over %q: err = %v; want ErrMiss", raw, err)
			}
			if v, err := c.Fetch(ctx, key, time.Minute, redistest.Constant("fresh")); v != "fresh" || err != nil {
				t.Errorf("Fetch over %q = %q, %v; want fresh (a miss)", raw, v, err)
			}
		}
		n := uint64(len(newer))
		if s := c.Stats(); s.DecodeErrors != 2*n || s.Misses != 2*n || s.Computes != n {
			t.Errorf("options %d: Stats = %+v; want each Get and Fetch counted as a miss and a decode error, %d computes", len(opts), s, n)
		}
	}
}

// doc is a JSON-like value of about 64 KiB: repetitive, as real documents
// are.
type doc struct {
	ID    int
	Items []item
}

type item struct {
	Name, Description string
	Price             int
	Tags              []string
}

func bigDoc() doc {
	d := doc{ID: 42}
	for i := range 400 {
		d.Items = append(d.Items, item{
			Name:        fmt.Sprint("item-", i),
			Description: "a fine thing with a long description that repeats itself, as descriptions do",
			Price:       i * 100,
			Tags:        []string{"new", "sale", fmt.Sprint("aisle-", i%12)},
		})
	}
	return d
}

// TestCompression: with WithCompression a large value is stored
// compressed (flagged in its header) and reads back equal; a small one
// stays plain; a Cache without the option reads it too (turning the option
// on or off is safe), while an older dogpile, which refuses header flags it
// does not know, reads it as a miss, never as garbage; and a payload that
// claims to decompress past WithMaxValueSize is a miss.
func TestCompression(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	c := New[doc](rdb, prefix(t), WithCompression(1024))
	want := bigDoc()
	if err := c.Set(ctx, "big", want, time.Minute); err != nil {
		t.Fatal(err)
	}
	stored, err := rdb.Get(ctx, c.valueKey("big")).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New[doc](rdb, prefix(t)).encode(want)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) >= len(plain)/3 || stored[2] != entry.FormatMeta || stored[3]&entry.FlagCompressed == 0 {
		t.Errorf("stored %d bytes (plain %d), header % x; want compressed to under a third, flagged", len(stored), len(plain), stored[:4])
	}
	got, err := c.Get(ctx, "big")
	if err != nil || got.Items[399].Name != "item-399" || len(got.Items) != 400 {
		t.Fatalf("Get = %d items, %v", len(got.Items), err)
	}
	if err := c.Set(ctx, "small", doc{ID: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if b, _ := rdb.Get(ctx, c.valueKey("small")).Bytes(); b[2] != entry.FormatVersion {
		t.Errorf("a value under the threshold is stored as format %d; want plain", b[2])
	}

	if got, err := New[doc](rdb, prefix(t)).Get(ctx, "big"); err != nil || len(got.Items) != 400 {
		t.Errorf("Get by a Cache without compression = %d items, %v; want the value", len(got.Items), err)
	}
	const olderFlags = entry.FlagNotFound // what readers before compression knew
	if stored[3]&^olderFlags == 0 {
		t.Error("the compressed flag is one an older reader knows: it would hand S2 bytes to the codec")
	}
	bomb := append([]byte{entry.Magic0, entry.Magic1, entry.FormatMeta, entry.FlagCompressed, 0, 0}, s2.Encode(nil, make([]byte, 2<<20))...)
	if err := rdb.Set(ctx, c.valueKey("bomb"), bomb, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	small := New[doc](rdb, prefix(t), WithCompression(1024), WithMaxValueSize(1<<20))
	if _, err := small.Get(ctx, "bomb"); !errors.Is(err, ErrMiss) || !strings.Contains(err.Error(), "above the limit") {
		t.Errorf("Get of a payload decompressing past the limit = %v; want ErrMiss naming the limit", err)
	}
}

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
	if v, err := c.Fetch(ctx, "fetch", time.Minute, redistest.Constant("v")); v != "v" || err != nil {
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

// TestEarlyGapFloor: the early-refresh gap is never below twice the last
// refresh's duration (times beta), unless capped at a third of the TTL.
func TestEarlyGapFloor(t *testing.T) {
	c := New[string](redistest.NopClient(t), WithEarlyRefresh(1.5))
	const took = 10 * time.Millisecond
	for range 1000 {
		if gap := c.earlyGap(took, time.Hour); gap < 30*time.Millisecond {
			t.Fatalf("earlyGap(%v) = %v; want at least 2 × took × beta = 30ms", took, gap)
		}
		if gap := c.earlyGap(took, 60*time.Millisecond); gap != 20*time.Millisecond {
			t.Fatalf("earlyGap(%v, ttl 60ms) = %v; want the cap, a third of the TTL", took, gap)
		}
	}
}
