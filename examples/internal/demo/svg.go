package demo

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// An SVG builds a self-contained SVG picture: no script, no font or image
// fetched from anywhere, so it shows the same in a browser, an image viewer
// and a README. Elements take a CSS class from the style sheet given to
// [NewSVG]; hover texts are <title> elements, which browsers show as
// tooltips without any script.
type SVG struct {
	b strings.Builder
}

// NewSVG starts a picture of the given size in pixels, with a title (shown
// by viewers, read by screen readers) and a CSS style sheet for its classes.
func NewSVG(width, height float64, title, css string) *SVG {
	s := &SVG{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="12">`+"\n",
		num(width), num(height), num(width), num(height))
	s.b.WriteString("<title>" + esc(title) + "</title>\n")
	s.b.WriteString("<style>" + esc(css) + "</style>\n")
	s.Rect(0, 0, width, height, "background", "")
	return s
}

// Rect draws a rectangle; tip, if not empty, is its hover text.
func (s *SVG) Rect(x, y, w, h float64, class, tip string) {
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" class="%s"`, num(x), num(y), num(max(w, 0)), num(max(h, 0)), esc(class))
	s.close("rect", tip)
}

// Line draws a line from (x1, y1) to (x2, y2).
func (s *SVG) Line(x1, y1, x2, y2 float64, class string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`+"\n", num(x1), num(y1), num(x2), num(y2), esc(class))
}

// Polyline draws a line through the points (xs[i], ys[i]); tip, if not
// empty, is its hover text.
func (s *SVG) Polyline(xs, ys []float64, class, tip string) {
	var pts []string
	for i := range min(len(xs), len(ys)) {
		pts = append(pts, num(xs[i])+","+num(ys[i]))
	}
	fmt.Fprintf(&s.b, `<polyline points="%s" class="%s"`, strings.Join(pts, " "), esc(class))
	s.close("polyline", tip)
}

// Text writes text with its anchor point at (x, y).
func (s *SVG) Text(x, y float64, class, text string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" class="%s">%s</text>`+"\n", num(x), num(y), esc(class), esc(text))
}

// close ends an element, with a <title> child when tip is set.
func (s *SVG) close(elem, tip string) {
	if tip == "" {
		s.b.WriteString("/>\n")
		return
	}
	s.b.WriteString("><title>" + esc(tip) + "</title></" + elem + ">\n")
}

// WriteTo writes the finished picture to w.
func (s *SVG) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, s.b.String()+"</svg>\n")
	return int64(n), err
}

// WriteFile writes the finished picture to the file called name.
func (s *SVG) WriteFile(name string) error {
	return os.WriteFile(name, []byte(s.b.String()+"</svg>\n"), 0o644)
}

// num formats a coordinate: two decimals at most, no trailing zeros.
func num(f float64) string {
	s := strings.TrimRight(fmt.Sprintf("%.2f", f), "0")
	return strings.TrimSuffix(s, ".")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// SVGContent is what [ReadSVG] found in a picture: enough for a test to
// check that a picture parses and shows what it should.
type SVGContent struct {
	Texts   []string       // the character data of every <text>, in order
	Classes map[string]int // elements per CSS class
	Titles  []string       // every <title>, the picture's first
}

// ReadSVG parses b as an SVG picture: XML whose root is an <svg> element in
// the SVG namespace. It fails on anything else, or on a reference to an
// outside resource (an href), which a self-contained picture has none of.
func ReadSVG(b []byte) (SVGContent, error) {
	c := SVGContent{Classes: map[string]int{}}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	var stack []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return c, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && (t.Name.Local != "svg" || t.Name.Space != "http://www.w3.org/2000/svg") {
				return c, fmt.Errorf("root element %s %s; want svg in the SVG namespace", t.Name.Space, t.Name.Local)
			}
			for _, a := range t.Attr {
				switch a.Name.Local {
				case "class":
					for _, cl := range strings.Fields(a.Value) {
						c.Classes[cl]++
					}
				case "href":
					return c, fmt.Errorf("<%s> refers to %q: not self-contained", t.Name.Local, a.Value)
				}
			}
			stack = append(stack, t.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			switch {
			case len(stack) > 0 && stack[len(stack)-1] == "text":
				c.Texts = append(c.Texts, string(t))
			case len(stack) > 0 && stack[len(stack)-1] == "title":
				c.Titles = append(c.Titles, string(t))
			}
		}
	}
	if len(c.Titles) == 0 {
		return c, errors.New("no <title>")
	}
	return c, nil
}
