package entry

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// Each header Append writes reads back through Parse with its Meta and
// payload, in the version its Meta and withExpiry call for.
func TestAppendParse(t *testing.T) {
	cases := []struct {
		m          Meta
		withExpiry bool
		version    byte
	}{
		{Meta{}, false, FormatVersion},
		{Meta{Took: 3 * time.Millisecond, Early: time.Second}, false, FormatMeta},
		{Meta{Compressed: true}, false, FormatMeta},
		{Meta{}, true, FormatDeadline},
		{Meta{Took: time.Microsecond, Early: 2 * time.Second, Compressed: true}, true, FormatDeadline},
	}
	for _, tc := range cases {
		b := append(Append(nil, tc.m, tc.withExpiry), "payload"...)
		if b[2] != tc.version {
			t.Errorf("Append(%+v, %v) wrote version %d; want %d", tc.m, tc.withExpiry, b[2], tc.version)
		}
		p, m, err := Parse(b)
		if err != nil || m != tc.m || string(p) != "payload" {
			t.Errorf("Parse(Append(%+v, %v)) = %q, %+v, %v; want payload, the same Meta", tc.m, tc.withExpiry, p, m, err)
		}
		if len(b)-len("payload") > MaxHeader {
			t.Errorf("header of %d bytes, above MaxHeader %d", len(b)-len("payload"), MaxHeader)
		}
	}
}

// A tombstone carries no payload, and says so without a decode.
func TestTombstone(t *testing.T) {
	for _, withExpiry := range []bool{false, true} {
		b := Append(nil, Meta{NotFound: true}, withExpiry)
		if !IsTombstone(b) {
			t.Errorf("IsTombstone(%q) = false", b)
		}
		if _, _, err := Parse(append(b, 'x')); err == nil {
			t.Errorf("Parse of a tombstone with a payload: no error")
		}
	}
	if IsTombstone(Append(nil, Meta{}, false)) || IsTombstone([]byte("xx")) {
		t.Error("IsTombstone of a value or of foreign bytes = true")
	}
}

// Bytes this code does not know are errors, never payloads.
func TestParseRefuses(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("dp"), []byte("xy\x01v"), []byte("dp\x07v"), []byte("dp\x03short"),
		{Magic0, Magic1, FormatMeta, 0x80}} {
		if p, _, err := Parse(b); err == nil {
			t.Errorf("Parse(%q) = %q, no error", b, p)
		}
	}
	if _, _, err := Parse([]byte("dp\x09")); !errors.Is(err, ErrVersion) {
		t.Errorf("Parse of version 9: %v; want ErrVersion", err)
	}
}

// The expiry the store script stamps reads back; SHA1 leaves it out.
func TestDeadline(t *testing.T) {
	b := append(Append(nil, Meta{}, true), "v"...)
	if d := Deadline(b); d != 0 {
		t.Errorf("Deadline of an unstamped entry = %d; want 0", d)
	}
	before := SHA1(b)
	binary.BigEndian.PutUint64(b[HeaderLen:], 1_800_000_000_000)
	if d := Deadline(b); d != 1_800_000_000_000 {
		t.Errorf("Deadline = %d; want the stamped 1800000000000", d)
	}
	if SHA1(b) != before {
		t.Error("SHA1 changed with the expiry stamp")
	}
	if Deadline(Append(nil, Meta{}, false)) != 0 {
		t.Error("Deadline of a version 1 entry is not 0")
	}
}
