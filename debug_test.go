package dogpile_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// debugPage is the page for one request: its status, headers and body.
func debugPage(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(t.Context(), method, target, nil))
	return w
}

// debugJSON is the page's JSON form, decoded.
type debugJSON struct {
	Time   time.Time
	Caches []struct {
		Prefix     string
		KeysHidden bool
		Stats      dogpile.Stats
		Ratios     map[string]*float64
		HotKeys    []dogpile.HotKey
	}
}

func getJSON(t *testing.T, h http.Handler) debugJSON {
	t.Helper()
	w := debugPage(t, h, http.MethodGet, "/debug/dogpile?format=json")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET ?format=json: %d %q; want 200 application/json\n%s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var p debugJSON
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("decode the page's JSON: %v\n%s", err, w.Body)
	}
	return p
}

// TestDebugHandlerShowsEachCache: two Caches of different value types, each
// under its prefix, with every Stats counter (by its field name, so that a
// counter added to Stats must show too), the hit ratio and near share, and
// the hot keys with their counts, in HTML and in JSON.
func TestDebugHandlerShowsEachCache(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t)
	users := dogpile.New[string](rdb, dogpile.WithPrefix(t.Name()+":users:"))
	beers := dogpile.New[Beer](rdb, dogpile.WithPrefix(t.Name()+":beers:"))
	ctx := t.Context()
	for range 3 { // a miss, then two hits
		users.Fetch(ctx, "ada", time.Minute, redistest.Constant("Ada"))
	}
	beers.Fetch(ctx, "pils", time.Minute, func(context.Context) (Beer, error) { return Beer{Name: "Pils"}, nil })
	h := dogpile.DebugHandler(users, beers)

	w := debugPage(t, h, http.MethodGet, "/debug/dogpile")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("GET: %d %q; want 200 text/html", w.Code, w.Header().Get("Content-Type"))
	}
	html := w.Body.String()
	want := []string{users.Prefix(), beers.Prefix(), "<code>ada</code>", "<code>pils</code>", "HitRatio", "66.7%", "NearShare"}
	for f := range reflect.TypeFor[dogpile.Stats]().Fields() {
		want = append(want, "<span>"+f.Name+"</span>")
	}
	for _, s := range want {
		if !strings.Contains(html, s) {
			t.Errorf("the HTML page lacks %q:\n%s", s, html)
		}
	}

	p := getJSON(t, h)
	if len(p.Caches) != 2 {
		t.Fatalf("JSON has %d Caches; want 2:\n%+v", len(p.Caches), p)
	}
	for i, c := range []dogpile.AnyCache{users, beers} {
		got := p.Caches[i]
		if got.Prefix != c.Prefix() || got.KeysHidden || got.Stats != c.Stats() {
			t.Errorf("JSON Cache %d = %q hidden %v %+v; want %q shown %+v", i, got.Prefix, got.KeysHidden, got.Stats, c.Prefix(), c.Stats())
		}
		if hot := c.HotKeys(20); !reflect.DeepEqual(got.HotKeys, hot) {
			t.Errorf("JSON %s HotKeys = %+v; want %+v", c.Prefix(), got.HotKeys, hot)
		}
	}
	if r := p.Caches[0].Ratios; r["HitRatio"] == nil || *r["HitRatio"] != 2.0/3 || r["NearShare"] == nil || *r["NearShare"] != 0 {
		t.Errorf("users' ratios = %v; want HitRatio 2/3, NearShare 0", r)
	}
	if hot := p.Caches[0].HotKeys; len(hot) != 1 || hot[0].Key != "ada" || hot[0].Misses != 1 || hot[0].Computes != 1 {
		t.Errorf("users' hot keys = %+v; want ada with 1 miss and 1 compute", hot)
	}
}

// TestDebugHandlerEscapesKeys: a key is data, and the HTML page shows it as
// text, never as markup; JSON carries it as it is.
func TestDebugHandlerEscapesKeys(t *testing.T) {
	t.Parallel()
	c := dogpile.New[string](redistest.Start(t), prefix(t))
	const evil = `<script>alert("hi")</script>`
	if _, err := c.Fetch(t.Context(), evil, time.Minute, redistest.Constant("v")); err != nil {
		t.Fatal(err)
	}
	h := dogpile.DebugHandler(c)
	html := debugPage(t, h, http.MethodGet, "/").Body.String()
	if strings.Contains(html, "<script") || !strings.Contains(html, "&lt;script&gt;alert(&#34;hi&#34;)&lt;/script&gt;") {
		t.Errorf("the HTML page does not show the key %q escaped:\n%s", evil, html)
	}
	if hot := getJSON(t, h).Caches[0].HotKeys; len(hot) != 1 || hot[0].Key != evil {
		t.Errorf("JSON hot keys = %+v; want the key %q", hot, evil)
	}
}

// TestDebugHandlerHidesKeys: a Cache wrapped by HideKeys shows its keys'
// counts under their ranks, and their names nowhere; a Cache beside it
// still shows its names.
func TestDebugHandlerHidesKeys(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t)
	sessions := dogpile.New[string](rdb, dogpile.WithPrefix(t.Name()+":sessions:"))
	users := dogpile.New[string](rdb, dogpile.WithPrefix(t.Name()+":users:"))
	ctx := t.Context()
	for _, k := range []string{"token-1f9a", "token-77c2", "token-77c2"} {
		sessions.Fetch(ctx, k, time.Minute, redistest.Constant("s"))
	}
	users.Fetch(ctx, "ada", time.Minute, redistest.Constant("Ada"))
	h := dogpile.DebugHandler(dogpile.HideKeys(sessions), users)

	html := debugPage(t, h, http.MethodGet, "/").Body.String()
	body := html + debugPage(t, h, http.MethodGet, "/?format=json").Body.String()
	if strings.Contains(body, "token-") {
		t.Errorf("the page shows a hidden key:\n%s", body)
	}
	for _, s := range []string{"key names hidden", "<code>#1</code>", "<code>#2</code>", "<code>ada</code>"} {
		if !strings.Contains(html, s) {
			t.Errorf("the HTML page lacks %q:\n%s", s, html)
		}
	}
	p := getJSON(t, h)
	hidden, shown := p.Caches[0], p.Caches[1]
	if !hidden.KeysHidden || len(hidden.HotKeys) != 2 || hidden.HotKeys[0].Key != "#1" || hidden.HotKeys[1].Key != "#2" ||
		hidden.HotKeys[0].Misses != 1 || hidden.Prefix != sessions.Prefix() {
		t.Errorf("hidden Cache = %+v; want KeysHidden, keys #1 and #2 with their counts, prefix %q", hidden, sessions.Prefix())
	}
	if shown.KeysHidden || len(shown.HotKeys) != 1 || shown.HotKeys[0].Key != "ada" {
		t.Errorf("Cache beside it = %+v; want its key ada shown", shown)
	}
}

// TestDebugHandlerIsReadOnly: GET and HEAD are served (HEAD without a
// body); every other method is refused with 405 and the methods allowed.
func TestDebugHandlerIsReadOnly(t *testing.T) {
	t.Parallel()
	c := dogpile.New[string](redistest.Start(t), prefix(t))
	h := dogpile.DebugHandler(c)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		w := debugPage(t, h, m, "/?format=json")
		if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q; want 405, Allow \"GET, HEAD\"", m, w.Code, w.Header().Get("Allow"))
		}
	}
	if w := debugPage(t, h, http.MethodHead, "/"); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Errorf("HEAD: %d with %d bytes; want 200 and no body", w.Code, w.Body.Len())
	}
	if w := debugPage(t, h, http.MethodGet, "/?format=xml"); w.Code != http.StatusBadRequest {
		t.Errorf("GET ?format=xml: %d; want 400", w.Code)
	}
}

// TestDebugHandlerPanicsOnNilCache: a nil Cache is found when the handler
// is made, not on its first request.
func TestDebugHandlerPanicsOnNilCache(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]func(){
		"nil":          func() { dogpile.DebugHandler(nil) },
		"nil *Cache":   func() { dogpile.DebugHandler((*dogpile.Cache[int])(nil)) },
		"HideKeys nil": func() { dogpile.HideKeys((*dogpile.Cache[int])(nil)) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestDebugHandlerShowsSourceCheck: a hit that WithSourceCheck found to
// disagree with the source shows as SourceInconsistency, marked on the
// HTML page; the near tier's ratio, with nothing sampled, is undefined.
func TestDebugHandlerShowsSourceCheck(t *testing.T) {
	t.Parallel()
	stale := func(context.Context, string) (string, error) { return "v2", nil } // the source moved on; nobody deleted
	c := dogpile.New[string](redistest.Start(t), prefix(t),
		dogpile.WithSourceCheck(1, stale), dogpile.WithSourceDelay(20*time.Millisecond))
	t.Cleanup(func() { c.Close() })
	for range 2 { // a miss, then a hit that is checked
		if _, err := c.Fetch(t.Context(), "k", time.Minute, redistest.Constant("v1")); err != nil {
			t.Fatal(err)
		}
	}
	redistest.Eventually(t, "the hit to be found inconsistent", func() bool { return c.Stats().SourceInconsistent == 1 })
	h := dogpile.DebugHandler(c)
	r := getJSON(t, h).Caches[0].Ratios
	if v := r["SourceInconsistency"]; v == nil || *v != 1 || r["NearInconsistency"] != nil {
		t.Errorf("Ratios = %v; want SourceInconsistency 1, NearInconsistency null", r)
	}
	html := debugPage(t, h, http.MethodGet, "/").Body.String()
	for _, s := range []string{`<div class="ratio bad"><span>SourceInconsistency</span><b>100.0%</b>`,
		`<div class="bad"><span>SourceInconsistent</span> 1</div>`, `<span>NearInconsistency</span><b>–</b>`} {
		if !strings.Contains(html, s) {
			t.Errorf("the HTML page lacks %q:\n%s", s, html)
		}
	}
}
