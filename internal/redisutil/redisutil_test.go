package redisutil

import (
	"strings"
	"testing"
	"time"
)

func TestMillisRoundsUp(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Microsecond, 1}, {999 * time.Microsecond, 1}, {time.Millisecond, 1},
		{1001 * time.Microsecond, 2}, {time.Hour * 24 * 30, 2592000000}, {1 << 62, 4611686018428},
	} {
		if got := Millis(c.d); got != c.want {
			t.Errorf("Millis(%v) = %d; want %d", c.d, got, c.want)
		}
	}
}

func TestTag(t *testing.T) {
	for _, name := range []string{"a", "orders:42", " ", "ünïcode"} {
		if got, want := Tag(name), "{"+name+"}"; got != want {
			t.Errorf("Tag(%q) = %q; want %q", name, got, want)
		}
	}
	for _, name := range []string{"{", "}", "{}", "a{b}c"} {
		tag := Tag(name)
		if strings.Count(tag, "{") != 1 || strings.Count(tag, "}") != 1 || len(tag) < 10 {
			t.Errorf("Tag(%q) = %q; want one non-empty hashed tag", name, tag)
		}
		// A plain name equal to the hash must not share its keys.
		plain := tag[1:strings.Index(tag, "}")]
		if Tag(plain) == tag {
			t.Errorf("Tag(%q) == Tag(%q) = %q", name, plain, tag)
		}
	}
	if Tag("{") == Tag("}") {
		t.Error("different names with braces share a tag")
	}
}

func TestToken(t *testing.T) {
	a, b := Token(), Token()
	if a == b || len(a) != 22 {
		t.Errorf("tokens %q, %q; want two different 22-character tokens", a, b)
	}
}

func TestWait(t *testing.T) {
	for _, c := range []struct {
		pttl int64
		want time.Duration
	}{{0, time.Millisecond}, {-1, time.Second}, {-2, time.Second}, {250, 250 * time.Millisecond}} {
		if got := Wait(c.pttl, time.Second); got != c.want {
			t.Errorf("Wait(%d) = %v; want %v", c.pttl, got, c.want)
		}
	}
}

func TestKeyIsPrefixAndTag(t *testing.T) {
	for _, name := range []string{"a", "orders:42", "{", "a{b}c", ""} {
		if got, want := Key("p:", name), "p:"+Tag(name); got != want {
			t.Errorf("Key(p:, %q) = %q; want %q", name, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Key("p:", "orders:42") }); n > 1 {
		t.Errorf("Key allocates %v times; want 1", n)
	}
}
