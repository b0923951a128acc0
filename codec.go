package dogpile

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// A Codec turns values into bytes and back. Unmarshal receives a pointer to
// a value of the Cache's type T. A Codec must be safe for concurrent use.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(b []byte, v any) error
}

// MsgPack is the default [Codec]: MessagePack, by
// github.com/vmihailenco/msgpack/v5.
var MsgPack Codec = msgpackCodec{}

type msgpackCodec struct{}

func (msgpackCodec) Marshal(v any) ([]byte, error)   { return msgpack.Marshal(v) }
func (msgpackCodec) Unmarshal(b []byte, v any) error { return msgpack.Unmarshal(b, v) }

// The stored bytes are an envelope: the two magic bytes "dp", one format
// version byte, then the codec's bytes. Bytes without this header (written
// by another library, or by a future format this code does not know) are
// treated as a miss and overwritten, never handed to the codec.
const (
	magic0, magic1 = 'd', 'p'
	formatVersion  = 1
	headerLen      = 3
)

var errHeader = errors.New("not a dogpile value (bad header)")

func (c *Cache[T]) encode(v T) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("codec panicked: %v", r)
		}
	}()
	p, err := c.opts.codec.Marshal(v)
	if err != nil {
		return nil, err
	}
	b = make([]byte, headerLen, headerLen+len(p))
	b[0], b[1], b[2] = magic0, magic1, formatVersion
	return append(b, p...), nil
}

// decode never panics: a codec that panics on foreign bytes reports an
// error instead.
func (c *Cache[T]) decode(b []byte) (v T, err error) {
	if len(b) < headerLen || b[0] != magic0 || b[1] != magic1 {
		return v, errHeader
	}
	if b[2] != formatVersion {
		return v, fmt.Errorf("unknown format version %d", b[2])
	}
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, fmt.Errorf("codec panicked: %v", r)
		}
	}()
	err = c.opts.codec.Unmarshal(b[headerLen:], &v)
	return v, err
}
