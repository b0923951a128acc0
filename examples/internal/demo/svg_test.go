package demo

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSVGEscapesAndParses(t *testing.T) {
	s := NewSVG(100, 50, `a <b> & "c"`, ".x{fill:#000}")
	s.Text(1, 2, "x", "p99 < 1ms & max > 1s")
	s.Rect(0, 0, 10, -5, "bar", "tip <here>")
	s.Polyline([]float64{0, 1}, []float64{2, 3}, "line", "")
	var b bytes.Buffer
	if _, err := s.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	c, err := ReadSVG(b.Bytes())
	if err != nil {
		t.Fatalf("ReadSVG: %v\n%s", err, b.String())
	}
	if !slices.Equal(c.Texts, []string{"p99 < 1ms & max > 1s"}) {
		t.Errorf("texts = %q; want the one text, unescaped", c.Texts)
	}
	if !slices.Equal(c.Titles, []string{`a <b> & "c"`, "tip <here>"}) {
		t.Errorf("titles = %q; want the picture's and the rect's", c.Titles)
	}
	if c.Classes["bar"] != 1 || c.Classes["line"] != 1 || c.Classes["background"] != 1 {
		t.Errorf("classes = %v; want bar, line and background once each", c.Classes)
	}
	if strings.Contains(b.String(), `height="-5"`) {
		t.Errorf("a negative height was written:\n%s", b.String())
	}
}

func TestReadSVGRejectsOtherDocuments(t *testing.T) {
	for _, doc := range []string{
		`<html><body/></html>`,
		`<svg xmlns="http://www.w3.org/2000/svg"><title>t</title><rect`,
		`<svg xmlns="http://www.w3.org/2000/svg"><title>t</title><image href="http://example.com/x.png"/></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg"></svg>`,
	} {
		if _, err := ReadSVG([]byte(doc)); err == nil {
			t.Errorf("ReadSVG(%q) = nil error; want a failure", doc)
		}
	}
}

func TestSeriesMergeShifts(t *testing.T) {
	a := Series{Step: 100 * time.Millisecond}
	a.Record(50*time.Millisecond, time.Millisecond)
	a.Record(-time.Millisecond, time.Millisecond) // before the start: first step
	b := Series{Step: 100 * time.Millisecond}
	b.Record(150*time.Millisecond, 7*time.Millisecond)
	a.Merge(b, 2)
	var got []int64
	for _, h := range a.Buckets {
		got = append(got, h.N)
	}
	if !slices.Equal(got, []int64{2, 0, 0, 1}) {
		t.Errorf("calls per step = %v; want [2 0 0 1] (b's step 1 shifted by 2)", got)
	}
	if a.Buckets[3].Max != 7*time.Millisecond {
		t.Errorf("step 3 max = %v; want 7ms", a.Buckets[3].Max)
	}
}
