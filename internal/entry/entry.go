// Package entry is the format of what a cache's value key holds: a
// header (a version, flags, the compute's duration, the early-refresh gap
// and, in version 3, the value's expiry in the server's clock), then the
// codec's bytes. It works on bytes alone; package dogpile encodes values
// into it.
package entry

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/dogpile-go/dogpile/internal/servertime"
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
	Magic0, Magic1 = 'd', 'p'
	FormatVersion  = 1 // a plain value
	FormatMeta     = 2 // a value (or a tombstone) with metadata
	FormatDeadline = 3 // version 2's content, after the value's expiry
	HeaderLen      = 3
	DeadlineLen    = 8
)

// Flags of a version 2 entry. Bits this code does not know make the entry
// unreadable, like an unknown version: a newer writer meant something by them.
const (
	FlagNotFound   = 1 << 0 // a tombstone: compute reported ErrNotFound
	FlagCompressed = 1 << 1 // the payload is S2-compressed (WithCompression)
	knownFlags     = FlagNotFound | FlagCompressed
)

// Meta is what an entry records besides the value.
type Meta struct {
	NotFound   bool          // a tombstone
	Compressed bool          // the payload is S2-compressed
	Took       time.Duration // how long the compute ran; 0 if not recorded
	Early      time.Duration // refresh once the remaining TTL is below this; 0: never early
}

// maxMicros is the longest duration an entry can record, in µs.
const maxMicros = uint64(math.MaxInt64 / int64(time.Microsecond))

var (
	errHeader  = errors.New("not a dogpile value (bad header)")
	ErrVersion = errors.New("unknown dogpile format version")
)

// append appends m as a version 2 or 3 header ends: flags and durations.
func (m Meta) append(b []byte) []byte {
	b = append(b, m.flags())
	b = binary.AppendUvarint(b, uint64(max(m.Took, 0)/time.Microsecond))
	return binary.AppendUvarint(b, uint64(max(m.Early, 0)/time.Microsecond))
}

// flags are m's flags in a version 2 or 3 header.
func (m Meta) flags() byte {
	var f byte
	if m.NotFound {
		f |= FlagNotFound
	}
	if m.Compressed {
		f |= FlagCompressed
	}
	return f
}

// IsTombstone reports whether b is a well-formed entry that says "not
// found", without decoding anything.
func IsTombstone(b []byte) bool {
	if len(b) < HeaderLen || b[0] != Magic0 || b[1] != Magic1 {
		return false
	}
	at := HeaderLen
	switch b[2] {
	case FormatMeta:
	case FormatDeadline:
		at += DeadlineLen
	default:
		return false
	}
	return len(b) > at && b[at]&FlagNotFound != 0
}

// readMeta reads the metadata of a version 2 or 3 entry from p and returns the
// rest: the payload.
func readMeta(p []byte) ([]byte, Meta, error) {
	var m Meta
	if len(p) < 1 || p[0]&^knownFlags != 0 {
		return nil, m, fmt.Errorf("%w: flags %x", ErrVersion, p[:min(len(p), 1)])
	}
	m.NotFound, m.Compressed = p[0]&FlagNotFound != 0, p[0]&FlagCompressed != 0
	rest := p[1:]
	for _, d := range []*time.Duration{&m.Took, &m.Early} {
		us, n := binary.Uvarint(rest)
		if n <= 0 || us > maxMicros {
			return nil, m, errors.New("bad duration in entry")
		}
		*d, rest = time.Duration(us)*time.Microsecond, rest[n:]
	}
	if m.NotFound && len(rest) != 0 {
		return nil, m, errors.New("a tombstone with a payload")
	}
	return rest, m, nil
}

// HasExpiry reports whether b is a version 3 entry, whose expiry follows
// its first bytes.
func HasExpiry(b []byte) bool {
	return len(b) >= HeaderLen+DeadlineLen && b[0] == Magic0 && b[1] == Magic1 && b[2] == FormatDeadline
}

// SHA1 is the SHA1 of entry b, without its expiry if it has one, as the
// cache's scripts compute it (package dogpile, lookLua's ident): a stale InvalidateTag stamps a value's expiry again,
// which does not make it another value.
func SHA1(b []byte) string {
	h := sha1.New()
	if HasExpiry(b) {
		h.Write(b[:HeaderLen])
		b = b[HeaderLen+DeadlineLen:]
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// MaxHeader bounds the length of a header that Append writes.
const MaxHeader = HeaderLen + DeadlineLen + 1 + 2*binary.MaxVarintLen64

// Append appends to b the header of an entry that records m: version 3
// (with an expiry for the store script to stamp; zeros until then) if
// withExpiry, else version 1 when m records nothing, else version 2.
func Append(b []byte, m Meta, withExpiry bool) []byte {
	switch {
	case withExpiry:
		b = append(b, Magic0, Magic1, FormatDeadline, 0, 0, 0, 0, 0, 0, 0, 0)
		return m.append(b)
	case m == (Meta{}):
		return append(b, Magic0, Magic1, FormatVersion)
	}
	return m.append(append(b, Magic0, Magic1, FormatMeta))
}

// Parse reads the header of entry b and returns its payload (the codec's
// bytes, maybe compressed; none for a tombstone) and its Meta. Bytes
// without a header this code knows are an error: never handed to a codec.
func Parse(b []byte) (payload []byte, m Meta, err error) {
	if len(b) < HeaderLen || b[0] != Magic0 || b[1] != Magic1 {
		return nil, m, errHeader
	}
	p := b[HeaderLen:]
	switch b[2] {
	case FormatVersion:
		return p, m, nil
	case FormatDeadline:
		if len(p) < DeadlineLen {
			return nil, m, errors.New("entry too short for its expiry")
		}
		p = p[DeadlineLen:]
		fallthrough
	case FormatMeta:
		return readMeta(p)
	}
	return nil, m, fmt.Errorf("%w %d", ErrVersion, b[2])
}

// Deadline returns the expiry stamped in entry b, unix ms in the server's
// clock, or 0 if it carries none.
func Deadline(b []byte) int64 {
	if !HasExpiry(b) {
		return 0
	}
	if d := binary.BigEndian.Uint64(b[HeaderLen:]); d <= uint64(servertime.MaxDeadline) {
		return int64(d)
	}
	return 0
}

// An Expiry is what a cache with freshness options keeps to read a value's
// remaining TTL from its entry's expiry, against its Clock.
type Expiry struct {
	Clock servertime.Clock
	// PTTLFirst is set when a GET found an entry without an expiry: the
	// next reads pipeline a PTTL again, until one finds an expiry.
	PTTLFirst atomic.Bool
}

// Remaining is the least time entry b has left in Redis, from its expiry
// and the clock, or false if either cannot tell.
func (f *Expiry) Remaining(b []byte) (time.Duration, bool) {
	d := Deadline(b)
	if d == 0 {
		return 0, false
	}
	return f.Clock.Remaining(d)
}
