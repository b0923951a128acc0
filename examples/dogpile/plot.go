package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// The picture -plot writes: a row per mode; on the left the computes that
// started in each 100 ms, on the right what the calls that began in each
// 100 ms took (p50, p99 and max, on a log scale). Every row shares its axes
// with the others, so the stampedes of the first modes and the flat line of
// the last read at a glance.
const (
	plotWidth  = 960.0
	plotTop    = 96.0  // title, settings and legend
	plotRowH   = 150.0 // a panel, its time axis and the gap below
	plotPanelH = 104.0
	plotPanelW = 372.0
	plotLeft   = 132.0 // the mode names and the computes axis
	plotGap    = 76.0  // between the panels: the latency axis's labels
	countCharW = 5.0   // width of a digit of a bar's count: a count wider than its bar is left out
)

const plotCSS = `.background{fill:#fff}
.title{font-size:16px;font-weight:bold}
.note{fill:#444}
.mode{font-size:14px;font-weight:bold}
.axis{stroke:#888;stroke-width:1}
.grid{stroke:#e6e6e6;stroke-width:1}
.tick{fill:#666;font-size:10px}
.count{fill:#444;font-size:8px;text-anchor:middle}
.end{text-anchor:end}
.middle{text-anchor:middle}
.fills{fill:#f1f1f1}
.computes{fill:#8c564b}
.p50{fill:none;stroke:#1f77b4;stroke-width:1.6}
.p99{fill:none;stroke:#ff7f0e;stroke-width:1.4}
.max{fill:none;stroke:#d62728;stroke-width:1}
.ref{stroke:#555;stroke-width:1;stroke-dasharray:4 3}
.swatch-p50{fill:#1f77b4}.swatch-p99{fill:#ff7f0e}.swatch-max{fill:#d62728}`

// A plotter draws the modes of one run on shared scales.
type plotter struct {
	svg         *demo.SVG
	cfg         config
	span        time.Duration // the time axis, 0 to span
	maxComputes int           // the computes axis, 0 to maxComputes
	lo, hi      float64       // the latency axis, log10 of seconds
}

// writePlot writes the picture of reps to the file called name.
func writePlot(name string, cfg config, server string, reps []modeReport) error {
	return drawPlot(cfg, server, reps).WriteFile(name)
}

func drawPlot(cfg config, server string, reps []modeReport) *demo.SVG {
	p := newPlotter(cfg, len(reps))
	p.scale(reps)
	p.header(server)
	for i, m := range reps {
		top := plotTop + float64(i)*plotRowH
		p.svg.Text(8, top+plotPanelH/2-6, "mode", m.Mode)
		p.svg.Text(8, top+plotPanelH/2+12, "note", fmt.Sprintf("%.2f computes", m.ComputesPerExpiry))
		p.svg.Text(8, top+plotPanelH/2+26, "note", "per expiry")
		p.computes(plotLeft, top, m, i == 0)
		p.latency(plotLeft+plotPanelW+plotGap, top, m)
	}
	return p.svg
}

func newPlotter(cfg config, rows int) *plotter {
	return &plotter{svg: demo.NewSVG(plotWidth, plotTop+float64(rows)*plotRowH, "dogpile demo: computes and caller latency over time", plotCSS),
		cfg: cfg, span: cfg.Duration, maxComputes: 1, lo: math.Inf(1), hi: math.Inf(-1)}
}

// scale fits the shared axes to every mode's timeline.
func (p *plotter) scale(reps []modeReport) {
	for _, m := range reps {
		p.span = max(p.span, time.Duration(len(m.Timeline))*timelineStep)
		for _, s := range m.Timeline {
			p.maxComputes = max(p.maxComputes, s.Computes)
			if s.Calls > 0 {
				p.lo = min(p.lo, math.Log10(max(s.P50, time.Microsecond).Seconds()))
				p.hi = max(p.hi, math.Log10(max(s.Max, time.Microsecond).Seconds()))
			}
		}
	}
	p.maxComputes = niceCeil(p.maxComputes)
	p.hi = max(p.hi, math.Log10(p.cfg.Compute.Seconds())) // the reference line is always on the axis
	if math.IsInf(p.lo, 1) {
		p.lo = p.hi - 1
	}
	p.lo, p.hi = math.Floor(p.lo), math.Ceil(p.hi)
	if p.hi <= p.lo {
		p.hi = p.lo + 1
	}
}

// header writes the title, the run's settings and the legend.
func (p *plotter) header(server string) {
	s, cfg := p.svg, p.cfg
	s.Text(8, 22, "title", "Computes and caller latency over time, per mode")
	s.Text(8, 42, "note", fmt.Sprintf("%d process(es) × %d goroutines × %d keys on %s; compute %v, TTL %v, %v per mode",
		cfg.Procs, cfg.Goroutines, cfg.Keys, server, cfg.Compute, cfg.TTL, cfg.Duration))
	s.Rect(plotLeft, 56, 12, 10, "computes", "")
	s.Text(plotLeft+16, 65, "note", "computes started per 100 ms (all processes)")
	s.Rect(plotLeft, 72, 12, 10, "fills", "")
	s.Text(plotLeft+16, 81, "note", "first TTL: the keys' first fills")
	x := plotLeft + plotPanelW + plotGap
	s.Text(x, 65, "note", "calls begun per 100 ms, latency:")
	for i, q := range []string{"p50", "p99", "max"} {
		s.Rect(x+float64(i)*52, 72, 14, 4, "swatch-"+q, "")
		s.Text(x+float64(i)*52+18, 78, "note", q)
	}
	s.Line(x+160, 75, x+180, 75, "ref")
	s.Text(x+184, 79, "note", "one compute")
}

// x returns the horizontal position of time t in a panel starting at x0.
func (p *plotter) x(x0 float64, t time.Duration) float64 {
	return x0 + plotPanelW*float64(t)/float64(p.span)
}

// frame draws what both panels share: the first TTL's band, the axes and
// the time ticks.
func (p *plotter) frame(x0, top float64) {
	s := p.svg
	s.Rect(x0, top, p.x(x0, min(p.cfg.TTL, p.span))-x0, plotPanelH, "fills", "")
	bottom := top + plotPanelH
	s.Line(x0, bottom, x0+plotPanelW, bottom, "axis")
	s.Line(x0, top, x0, bottom, "axis")
	every := time.Second * time.Duration(max(1, int(math.Ceil(p.span.Seconds()/10))))
	for t := time.Duration(0); t <= p.span; t += every {
		s.Line(p.x(x0, t), bottom, p.x(x0, t), bottom+4, "axis")
		s.Text(p.x(x0, t), bottom+16, "tick middle", fmt.Sprintf("%.0fs", t.Seconds()))
	}
}

// computes draws a mode's computes per step as bars.
func (p *plotter) computes(x0, top float64, m modeReport, first bool) {
	s := p.svg
	p.frame(x0, top)
	if first {
		s.Text(x0+4, top+12, "tick", "first fills")
	}
	bottom := top + plotPanelH
	for _, n := range slices.Compact([]int{0, p.maxComputes / 2, p.maxComputes}) {
		y := bottom - plotPanelH*float64(n)/float64(p.maxComputes)
		s.Line(x0-4, y, x0, y, "axis")
		s.Text(x0-6, y+3, "tick end", fmt.Sprint(n))
	}
	w := p.x(x0, timelineStep) - x0
	for i, st := range m.Timeline {
		if st.Computes == 0 {
			continue
		}
		h := plotPanelH * float64(st.Computes) / float64(p.maxComputes)
		at := time.Duration(i) * timelineStep
		s.Rect(p.x(x0, at)+0.5, bottom-h, w-1, h, "computes",
			fmt.Sprintf("%s, %.1f–%.1f s: %d computes", m.Mode, at.Seconds(), (at+timelineStep).Seconds(), st.Computes))
		if label := fmt.Sprint(st.Computes); float64(len(label))*countCharW <= w {
			s.Text(p.x(x0, at)+w/2, bottom-h-3, "count", label)
		}
	}
}

// latency draws a mode's p50, p99 and max per step on a log scale, with
// the compute's duration as a reference line.
func (p *plotter) latency(x0, top float64, m modeReport) {
	s := p.svg
	p.frame(x0, top)
	bottom := top + plotPanelH
	for e := p.lo; e <= p.hi; e++ {
		y := p.y(top, math.Pow(10, e))
		if e > p.lo {
			s.Line(x0, y, x0+plotPanelW, y, "grid")
		}
		s.Text(x0-6, y+3, "tick end", decade(e))
	}
	ref := p.y(top, p.cfg.Compute.Seconds())
	s.Line(x0, ref, x0+plotPanelW, ref, "ref")
	for _, q := range []struct {
		class string
		of    func(step) time.Duration
	}{
		{"max", func(s step) time.Duration { return s.Max }},
		{"p99", func(s step) time.Duration { return s.P99 }},
		{"p50", func(s step) time.Duration { return s.P50 }},
	} {
		var xs, ys []float64
		flush := func() {
			if len(xs) > 0 {
				s.Polyline(xs, ys, q.class, m.Mode+" latency "+q.class)
			}
			xs, ys = nil, nil
		}
		for i, st := range m.Timeline {
			if st.Calls == 0 { // no call began here: break the line
				flush()
				continue
			}
			xs = append(xs, p.x(x0, time.Duration(i)*timelineStep+timelineStep/2))
			ys = append(ys, min(bottom, p.y(top, q.of(st).Seconds())))
		}
		flush()
	}
}

// y returns the vertical position of a latency of sec seconds.
func (p *plotter) y(top, sec float64) float64 {
	f := (math.Log10(max(sec, 1e-9)) - p.lo) / (p.hi - p.lo)
	return top + plotPanelH*(1-max(0, min(1, f)))
}

// decade labels the latency 10^e seconds: 100µs, 1ms, 10ms, 1s.
func decade(e float64) string {
	d := time.Duration(math.Round(math.Pow(10, e) * float64(time.Second)))
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d >= time.Microsecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	}
	return fmt.Sprintf("%dns", d.Nanoseconds())
}

// niceCeil rounds n up to 1, 2 or 5 times a power of ten.
func niceCeil(n int) int {
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= n {
				return m * p
			}
		}
	}
}
