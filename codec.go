package dogpile

import "github.com/vmihailenco/msgpack/v5"

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
