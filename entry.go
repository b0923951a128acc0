package dogpile

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
)

// An entry is what a value key holds: a header, then the codec's bytes.
//
//	version 1: 'd' 'p' 0x01 payload
//	version 2: 'd' 'p' 0x02 flags uvarint(took) uvarint(early) payload
//	version 3: 'd' 'p' 0x03 deadline flags uvarint(took) uvarint(early) payload
//
// Version 1 is written whenever there is nothing to record but the value,
// so that processes still running an older dogpile keep reading what newer
// ones store during a rolling deploy. Version 2 adds what early refresh and
// negative caching need: how long the compute took and the early-refresh gap
// drawn for this value (both in µs), and flags (a not-found tombstone has no
// payload; a compressed payload is S2, see WithCompression, which a reader
// that does not know the flag treats as unreadable). Version 3, written by a
// Cache with freshness options (see freshRead), adds the value's expiry:
// 8 bytes, big-endian unix ms in the server's clock, which the store script
// stamps (the client writes zeros; zero means unknown), so that a hit needs
// no PTTL. Bytes without a header this code knows
// (written by another library, or by a newer dogpile) are a miss: counted,
// overwritten, and never handed to the codec.
const (
	magic0, magic1 = 'd', 'p'
	formatVersion  = 1 // a plain value
	formatMeta     = 2 // a value (or a tombstone) with metadata
	formatDeadline = 3 // version 2's content, after the value's expiry
	headerLen      = 3
	deadlineLen    = 8
)

// Flags of a version 2 entry. Bits this code does not know make the entry
// unreadable, like an unknown version: a newer writer meant something by them.
const (
	flagNotFound   = 1 << 0 // a tombstone: compute reported ErrNotFound
	flagCompressed = 1 << 1 // the payload is S2-compressed (WithCompression)
	knownFlags     = flagNotFound | flagCompressed
)

// meta is what an entry records besides the value.
type meta struct {
	notFound   bool          // a tombstone
	compressed bool          // the payload is S2-compressed
	took       time.Duration // how long the compute ran; 0 if not recorded
	early      time.Duration // refresh once the remaining TTL is below this; 0: never early
}

// maxMicros is the longest duration an entry can record, in µs.
const maxMicros = uint64(math.MaxInt64 / int64(time.Microsecond))

var (
	errHeader  = errors.New("not a dogpile value (bad header)")
	errVersion = errors.New("unknown dogpile format version")
)

// append appends m as a version 2 or 3 header ends: flags and durations.
func (m meta) append(b []byte) []byte {
	b = append(b, m.flags())
	b = binary.AppendUvarint(b, uint64(max(m.took, 0)/time.Microsecond))
	return binary.AppendUvarint(b, uint64(max(m.early, 0)/time.Microsecond))
}

// flags are m's flags in a version 2 or 3 header.
func (m meta) flags() byte {
	var f byte
	if m.notFound {
		f |= flagNotFound
	}
	if m.compressed {
		f |= flagCompressed
	}
	return f
}

// isTombstone reports whether b is a well-formed entry that says "not
// found", without decoding anything.
func isTombstone(b []byte) bool {
	if len(b) < headerLen || b[0] != magic0 || b[1] != magic1 {
		return false
	}
	at := headerLen
	switch b[2] {
	case formatMeta:
	case formatDeadline:
		at += deadlineLen
	default:
		return false
	}
	return len(b) > at && b[at]&flagNotFound != 0
}

// readMeta reads the metadata of a version 2 or 3 entry from p and returns the
// rest: the payload.
func readMeta(p []byte) ([]byte, meta, error) {
	var m meta
	if len(p) < 1 || p[0]&^knownFlags != 0 {
		return nil, m, fmt.Errorf("%w: flags %x", errVersion, p[:min(len(p), 1)])
	}
	m.notFound, m.compressed = p[0]&flagNotFound != 0, p[0]&flagCompressed != 0
	rest := p[1:]
	for _, d := range []*time.Duration{&m.took, &m.early} {
		us, n := binary.Uvarint(rest)
		if n <= 0 || us > maxMicros {
			return nil, m, errors.New("bad duration in entry")
		}
		*d, rest = time.Duration(us)*time.Microsecond, rest[n:]
	}
	if m.notFound && len(rest) != 0 {
		return nil, m, errors.New("a tombstone with a payload")
	}
	return rest, m, nil
}

// hasExpiry reports whether b is a version 3 entry, whose expiry follows
// its first bytes.
func hasExpiry(b []byte) bool {
	return len(b) >= headerLen+deadlineLen && b[0] == magic0 && b[1] == magic1 && b[2] == formatDeadline
}

// sha1hex is the SHA1 of entry b, without its expiry if it has one (see
// lookLua's ident): a stale InvalidateTag stamps a value's expiry again,
// which does not make it another value.
func sha1hex(b []byte) string {
	h := sha1.New()
	if hasExpiry(b) {
		h.Write(b[:headerLen])
		b = b[headerLen+deadlineLen:]
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
