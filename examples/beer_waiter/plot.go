package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// The picture -plot writes: a lane per waiter, in arrival order, with the
// time it waited for the tap and the time it drank, labelled with its
// fencing number. Times are the local clock of each waiter's process (the
// processes of one run share the machine), from the first arrival.
const (
	laneH      = 16.0
	laneGap    = 6.0
	lanesTop   = 92.0 // title, settings and legend
	lanesLeft  = 80.0 // the waiters' names
	lanesWidth = 780.0
	fenceRoom  = 140.0 // right of the lanes: the last fence's label
)

const lanesCSS = `.background{fill:#fff}
.title{font-size:16px;font-weight:bold}
.note{fill:#444}
.name{font-size:12px}
.axis{stroke:#888;stroke-width:1}
.grid{stroke:#ececec;stroke-width:1}
.tick{fill:#666;font-size:10px}
.middle{text-anchor:middle}
.waiting{fill:#f4c27a}
.gaveup{fill:#e8a0a0}
.drinking{fill:#3b78b0}
.error{fill:#b22222}
.fence{fill:#1b3f60;font-size:10px;font-family:monospace}`

// writePlot writes the picture of rep to the file called name.
func writePlot(name string, cfg config, rep report) error {
	return drawLanes(cfg, rep).WriteFile(name)
}

func drawLanes(cfg config, rep report) *demo.SVG {
	ws := slices.Clone(rep.WaiterTable)
	slices.SortFunc(ws, func(a, b waiter) int { return a.ID - b.ID })
	height := lanesTop + float64(len(ws))*(laneH+laneGap) + 30
	s := demo.NewSVG(lanesLeft+lanesWidth+fenceRoom, height, "beer_waiter: who held the tap, and when", lanesCSS)
	lanesHeader(s, cfg, rep)
	if len(ws) == 0 {
		return s
	}
	origin, end := ws[0].Arrive, ws[0].Arrive
	for _, w := range ws {
		origin = min(origin, w.Arrive)
		end = max(end, w.Got+w.Drink.Microseconds())
	}
	span := max(end-origin, 1)
	x := func(us int64) float64 { return lanesLeft + lanesWidth*float64(us-origin)/float64(span) }
	bottom := lanesTop + float64(len(ws))*(laneH+laneGap)
	timeAxis(s, x, origin, span, bottom)
	for i, w := range ws {
		y := lanesTop + float64(i)*(laneH+laneGap)
		lane(s, x, y, w, rep.Fenced)
	}
	return s
}

// lanesHeader writes the title, the run's settings and the legend.
func lanesHeader(s *demo.SVG, cfg config, rep report) {
	kind := "plain lock.Mutex"
	switch {
	case !rep.Fenced:
		kind = "lock/memcache Mutex, no fencing"
	case cfg.Fair:
		kind = "lock.Mutex with WithFair: first come, first served"
	}
	s.Text(8, 22, "title", "Who held the tap, and when")
	s.Text(8, 42, "note", fmt.Sprintf("%d waiters in %d process(es), %s; each gives up after %v; %d served, %d gave up",
		rep.Waiters, rep.Procs, kind, cfg.Timeout, rep.Served, rep.TimedOut))
	x := lanesLeft
	for _, l := range []struct{ class, text string }{
		{"waiting", "waiting for the tap"}, {"drinking", "drinking (holds the lock)"}, {"gaveup", "waited, then gave up"},
	} {
		s.Rect(x, 56, 14, 10, l.class, "")
		s.Text(x+18, 65, "note", l.text)
		x += 190
	}
	if rep.Fenced {
		s.Text(lanesLeft, 82, "note", "the number after a drink is its fencing number: they rise in the order the tap was held")
	}
}

// timeAxis draws vertical grid lines and labels at round times.
func timeAxis(s *demo.SVG, x func(int64) float64, origin, span int64, bottom float64) {
	step := niceStep(time.Duration(span) * time.Microsecond / 8)
	for t := time.Duration(0); t.Microseconds() <= span; t += step {
		at := origin + t.Microseconds()
		s.Line(x(at), lanesTop-4, x(at), bottom, "grid")
		s.Text(x(at), bottom+14, "tick middle", strconv.FormatFloat(t.Seconds(), 'f', -1, 64)+"s")
	}
	s.Line(lanesLeft, bottom, lanesLeft+lanesWidth, bottom, "axis")
}

// lane draws one waiter: its wait, then its drink or its giving up.
func lane(s *demo.SVG, x func(int64) float64, y float64, w waiter, fenced bool) {
	s.Text(8, y+laneH-4, "name", fmt.Sprintf("w%02d p%d", w.ID, w.Proc))
	wait := "waiting"
	switch {
	case w.Err != "" && !w.Served:
		wait = "error"
	case !w.Served:
		wait = "gaveup"
	}
	s.Rect(x(w.Arrive), y, x(w.Got)-x(w.Arrive), laneH, wait, fmt.Sprintf("w%02d waited %s", w.ID, demo.Dur(w.Wait)))
	if !w.Served {
		return
	}
	end := w.Got + w.Drink.Microseconds()
	s.Rect(x(w.Got), y, x(end)-x(w.Got), laneH, "drinking", fmt.Sprintf("w%02d drank %s", w.ID, demo.Dur(w.Drink)))
	if fenced {
		s.Text(x(end)+4, y+laneH-4, "fence", fmt.Sprint(w.Fence))
	}
}

// niceStep rounds d up to 1, 2 or 5 times a power of ten.
func niceStep(d time.Duration) time.Duration {
	p := time.Duration(math.Pow(10, math.Floor(math.Log10(float64(max(d, 1))))))
	for _, m := range []time.Duration{1, 2, 5, 10} {
		if m*p >= d {
			return m * p
		}
	}
	return 10 * p
}
