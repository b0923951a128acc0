// Package debugpage serves dogpile's debug page (dogpile.DebugHandler): the
// figures of a process's Caches as HTML for a person or JSON for a script.
// It knows nothing of dogpile's types, which import it: the root package
// hands it each Cache's figures as plain values, and the Stats struct as
// any, rendered field by field so that a counter added to Stats shows up
// without a change here.
package debugpage

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A Cache is what the page shows of one Cache.
type Cache struct {
	Prefix     string
	KeysHidden bool     // the keys' names are replaced by their rank (dogpile.HideKeys)
	Stats      any      // a struct of counters (dogpile.Stats), shown field by field
	Alarms     []string // fields of Stats whose being above zero is worth a look
	Ratios     []Ratio
	HotKeys    []HotKey
}

// A Ratio is Num/Den, shown as a percentage; with Den 0 it is undefined.
type Ratio struct {
	Name string // as in the JSON, "HitRatio"
	Of   string // how it is computed, "Hits / (Hits + Misses)"
	Num  uint64
	Den  uint64
	// Alarm marks a ratio whose being above zero is worth a look.
	Alarm bool
}

// Value is r as a fraction, or nil when Den is 0.
func (r Ratio) Value() *float64 {
	if r.Den == 0 {
		return nil
	}
	v := float64(r.Num) / float64(r.Den)
	return &v
}

// A HotKey is one line of a Cache's hot-key report.
type HotKey struct {
	Key                            string
	Reads, Misses, Computes, Waits uint64
}

// Handler returns the page's handler; it calls figures on each request.
// Only GET and HEAD are served: the page changes nothing, and a POST or
// a DELETE that seems to succeed would mislead.
func Handler(figures func() []Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: the page is read-only (GET, HEAD)", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		var (
			body []byte
			err  error
		)
		switch format := r.URL.Query().Get("format"); format {
		case "json":
			h.Set("Content-Type", "application/json")
			body, err = marshalJSON(figures(), time.Now())
		case "", "html":
			h.Set("Content-Type", "text/html; charset=utf-8")
			// Key names come from data: html/template escapes them, and
			// this policy stops any script that got through anyway.
			h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
			body, err = renderHTML(figures(), time.Now())
		default:
			http.Error(w, fmt.Sprintf("unknown format %q: want html or json", format), http.StatusBadRequest)
			return
		}
		if err != nil {
			http.Error(w, "dogpile debug page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		if r.Method == http.MethodHead {
			return
		}
		w.Write(body)
	})
}

// jsonPage is the JSON form. Its names are Go's field names, as in
// dogpile.Stats and dogpile.HotKey, so that a script reads the same names
// as a program.
type jsonPage struct {
	Time   time.Time
	Caches []jsonCache
}

type jsonCache struct {
	Prefix     string
	KeysHidden bool
	Stats      any
	Ratios     map[string]*float64 // null when undefined (no hits yet)
	HotKeys    []HotKey
}

func marshalJSON(caches []Cache, now time.Time) ([]byte, error) {
	p := jsonPage{Time: now.UTC(), Caches: make([]jsonCache, len(caches))}
	for i, c := range caches {
		j := jsonCache{Prefix: c.Prefix, KeysHidden: c.KeysHidden, Stats: c.Stats,
			Ratios: make(map[string]*float64, len(c.Ratios)), HotKeys: c.HotKeys}
		for _, r := range c.Ratios {
			j.Ratios[r.Name] = r.Value()
		}
		if j.HotKeys == nil {
			j.HotKeys = []HotKey{} // [] rather than null: no key was read
		}
		p.Caches[i] = j
	}
	b, err := json.MarshalIndent(p, "", "  ")
	return append(b, '\n'), err
}

// A field is one counter of a Stats struct, for the HTML table.
type field struct {
	Name  string
	Value string
	Alarm bool // a counter of Alarms above zero
}

// fields lists the exported fields of the struct s in declaration order.
func fields(s any, alarms []string) []field {
	v := reflect.Indirect(reflect.ValueOf(s))
	if v.Kind() != reflect.Struct {
		return nil
	}
	var fs []field
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		f := field{Name: sf.Name, Value: fmt.Sprint(v.Field(i).Interface())}
		if v.Field(i).CanUint() {
			f.Value = group(v.Field(i).Uint())
		}
		for _, a := range alarms {
			if a == sf.Name && !v.Field(i).IsZero() {
				f.Alarm = true
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// group writes n with its digits in groups of three, 1 234 567, for the
// eye (the JSON keeps plain numbers).
func group(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f") // a narrow no-break space
		}
		b.WriteRune(d)
	}
	return b.String()
}
