package dogpile

import (
	"fmt"

	"github.com/klauspost/compress/s2"
)

// Compression (WithCompression) and the size bound (WithMaxValueSize),
// which is one bound for both ends: the entry as it is uncompressed. A
// store checks it (see encodeEntry) and a read checks it again from S2's
// length prefix before decompressing, so whatever is stored is readable,
// and no read allocates more than the bound for a value.

// compress returns p S2-compressed, and true, if it is longer than the
// WithCompression threshold and that makes it shorter; else p and false.
// A payload that encodeEntry refuses anyway is not compressed: no CPU is
// spent on it.
func (c *Cache[T]) compress(p []byte) ([]byte, bool) {
	if c.opts.compressMin == 0 || len(p) <= c.opts.compressMin || headerLen+len(p) > c.opts.maxValue {
		return p, false
	}
	if z := s2.Encode(nil, p); len(z) < len(p) {
		return z, true
	}
	return p, false
}

// decompress returns the S2 payload p, after a header of head bytes,
// decompressed. It refuses, before allocating anything, one whose entry
// would then exceed WithMaxValueSize, the bound encodeEntry checked: only
// bytes that no Cache with this limit stored (another limit's, or bytes
// crafted to exhaust memory: S2's length prefix is a claim) are refused.
func (c *Cache[T]) decompress(p []byte, head int) ([]byte, error) {
	n, err := s2.DecodedLen(p)
	switch {
	case err != nil:
		return nil, fmt.Errorf("compressed payload: %w", err)
	case head+n > c.opts.maxValue:
		return nil, tooLarge{head + n, c.opts.maxValue}
	}
	return s2.Decode(nil, p)
}
