package dogpile

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// oldEntry is what dogpile wrote before the entry format had versions
// beyond 1 (bytes captured from that code): it must still read.
const oldEntry = "dp\x01\x83\xa4Name\xa4Pils\xa3ABV\xcb@\x13333333\xa4Tags\x91\xa5crisp"

func TestEntryReadsOldFormat(t *testing.T) {
	c := New[beer](nopClient(t))
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
	c := New[beer](nopClient(t))
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
	c := New[beer](nopClient(t))
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
			if err := c.client.Set(ctx, c.keys(key).value, raw, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get(ctx, key); !errors.Is(err, ErrMiss) {
				t.Errorf("Get over %q: err = %v; want ErrMiss", raw, err)
			}
			if v, err := c.Fetch(ctx, key, time.Minute, constant("fresh")); v != "fresh" || err != nil {
				t.Errorf("Fetch over %q = %q, %v; want fresh (a miss)", raw, v, err)
			}
		}
		n := uint64(len(newer))
		if s := c.Stats(); s.DecodeErrors != 2*n || s.Misses != 2*n || s.Computes != n {
			t.Errorf("options %d: Stats = %+v; want each Get and Fetch counted as a miss and a decode error, %d computes", len(opts), s, n)
		}
	}
}
