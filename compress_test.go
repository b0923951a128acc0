package dogpile

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/dogpile-go/dogpile/internal/entry"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

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
