package debugpage

import (
	"bytes"
	"fmt"
	"html/template"
	"time"
)

// htmlCache is a Cache as the template shows it.
type htmlCache struct {
	Cache
	Fields []field
}

func renderHTML(caches []Cache, now time.Time) ([]byte, error) {
	view := struct {
		Time   string
		Caches []htmlCache
	}{Time: now.Format("2006-01-02 15:04:05 MST")}
	for _, c := range caches {
		view.Caches = append(view.Caches, htmlCache{Cache: c, Fields: fields(c.Stats, c.Alarms)})
	}
	var b bytes.Buffer
	err := page.Execute(&b, view)
	return b.Bytes(), err
}

// percent shows a ratio; an undefined one (nothing to divide by) is a dash.
func percent(r Ratio) string {
	v := r.Value()
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

// html/template escapes every value by its context: key names come from
// data, and a key such as "<script>" must show as text.
var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"percent": percent,
	"rank":    func(i int) int { return i + 1 },
	"group":   group,
	"bad":     func(r Ratio) bool { return r.Alarm && r.Num > 0 },
}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dogpile</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #222; background: #fafafa; }
header { display: flex; align-items: baseline; gap: 1em; border-bottom: 2px solid #333; margin-bottom: 1em; }
h1 { font-size: 1.6em; margin: 0 0 .2em; }
header p { margin: 0; color: #666; }
section { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .8em 1.2em 1.2em; margin-bottom: 1.5em; }
h2 { font-size: 1.2em; margin: .2em 0 .6em; }
code { font: 13px ui-monospace, SFMono-Regular, Menlo, monospace; }
.tag { font-size: .75em; font-weight: normal; background: #eee; border-radius: 3px; padding: .1em .5em; color: #555; }
.ratios { display: flex; gap: 1em; flex-wrap: wrap; margin-bottom: 1em; }
.ratio { border: 1px solid #ddd; border-radius: 4px; padding: .4em .8em; min-width: 11em; }
.ratio b { font-size: 1.4em; display: block; }
.ratio small { color: #777; display: block; }
.cols { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 2em; align-items: start; }
table { border-collapse: collapse; width: 100%; }
caption { text-align: left; font-weight: 600; padding-bottom: .3em; }
th, td { padding: .15em .6em; border-bottom: 1px solid #eee; text-align: right; }
th { background: #f3f3f3; }
td.key, th.key { text-align: left; word-break: break-all; }
.stats { display: grid; grid-template-columns: 1fr 1fr; column-gap: 1.5em; }
.stats h3 { grid-column: 1 / -1; font-size: 1em; margin: 0 0 .3em; }
.stats div { display: flex; justify-content: space-between; border-bottom: 1px solid #eee; padding: .1em 0; }
.stats span { color: #555; }
.bad, .bad span { color: #b00; font-weight: 600; }
.ratio.bad { border-color: #b00; }
.none { color: #888; text-align: left; }
</style>
</head>
<body>
<header><h1>dogpile</h1><p>{{len .Caches}} {{if eq (len .Caches) 1}}Cache{{else}}Caches{{end}} in this process · {{.Time}} · <a href="?format=json">JSON</a></p></header>
{{range .Caches}}
<section>
<h2>prefix <code>{{.Prefix}}</code>{{if .KeysHidden}} <span class="tag">key names hidden</span>{{end}}</h2>
<div class="ratios">
{{range .Ratios}}<div class="ratio{{if bad .}} bad{{end}}"><span>{{.Name}}</span><b>{{percent .}}</b><small>{{.Of}}: {{group .Num}} / {{group .Den}}</small></div>
{{end}}</div>
<div class="cols">
<table>
<caption>Hot keys: this process's reads over the last 1–2 minutes (Reads estimated)</caption>
<tr><th>#</th><th class="key">Key</th><th>Reads</th><th>Misses</th><th>Computes</th><th>Waits</th></tr>
{{range $i, $k := .HotKeys}}<tr><td>{{rank $i}}</td><td class="key"><code>{{$k.Key}}</code></td><td>{{group $k.Reads}}</td><td>{{group $k.Misses}}</td><td>{{group $k.Computes}}</td><td>{{group $k.Waits}}</td></tr>
{{else}}<tr><td colspan="6" class="none">no reads yet</td></tr>
{{end}}</table>
<div class="stats"><h3>Stats since New</h3>
{{range .Fields}}<div{{if .Alarm}} class="bad"{{end}}><span>{{.Name}}</span> {{.Value}}</div>
{{end}}</div>
</div>
</section>
{{else}}
<p>No Caches were given to DebugHandler.</p>
{{end}}
</body>
</html>
`))
