package dogpile

import (
	"bytes"
	"reflect"
	"testing"
)

type beer struct {
	Name string
	ABV  float64
	Tags []string
}

func TestCodecRoundTrip(t *testing.T) {
	c := New[beer](nopClient(t))
	for _, v := range []beer{{}, {Name: "Pils", ABV: 4.8}, {Name: "IPA", Tags: []string{"hoppy", ""}}} {
		b, err := c.encode(v)
		if err != nil {
			t.Fatalf("encode(%+v): %v", v, err)
		}
		if !bytes.HasPrefix(b, []byte{'d', 'p', formatVersion}) {
			t.Errorf("encode(%+v) = %q; want the header dp\\x01 first", v, b)
		}
		got, err := c.decode(b)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Errorf("decode(encode(%+v)) = %+v, %v", v, got, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	c := New[beer](nopClient(t))
	for _, b := range []string{"", "d", "dp", "xp\x01\x80", "dp\x02\x80", "dp\x01", "dp\x01\xc1", "dp\x01\x81\xa4Name\x01"} {
		if v, err := c.decode([]byte(b)); err == nil {
			t.Errorf("decode(%q) = %+v, nil; want an error", b, v)
		}
	}
}

// FuzzDecode checks that decoding arbitrary bytes never panics, and that
// whatever decodes encodes and decodes to the same value.
func FuzzDecode(f *testing.F) {
	c := New[beer](nopClient(f))
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
