package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// report is the outcome of a run, as printed and as JSON.
type report struct {
	Server      string   `json:"server"`
	Waiters     int      `json:"waiters"`
	Procs       int      `json:"procs"`
	Tap         string   `json:"tap"`
	Fair        bool     `json:"fair"`
	Timeout     string   `json:"timeout"`
	Served      int      `json:"served"`
	TimedOut    int      `json:"timed_out"`
	Errors      int      `json:"errors"`
	MaxHolders  int64    `json:"max_concurrent_holders"`
	Fenced      bool     `json:"fenced"` // false on memcached: no fencing numbers to check
	FencesOK    bool     `json:"fences_strictly_increasing"`
	Overlaps    int      `json:"overlapping_holds"`
	Overtaken   int      `json:"overtaken"` // pairs served out of arrival order; -1 when not measured (simultaneous arrivals, or memcached)
	Lost        int      `json:"lost_leases"`
	Elapsed     string   `json:"elapsed"`
	Failures    []string `json:"failures,omitempty"`
	WaiterTable []waiter `json:"waiter_results"`
}

// summarize orders the waiters (served in hold order, then the others) and
// checks the mutex's promises.
func summarize(cfg config, all []waiter, maxHolders int64, elapsed time.Duration) report {
	slices.SortFunc(all, func(a, b waiter) int {
		switch {
		case a.Served != b.Served:
			if a.Served {
				return -1
			}
			return 1
		case a.Served:
			return int(a.Seq - b.Seq)
		}
		return a.ID - b.ID
	})
	rep := report{Waiters: cfg.Waiters, Procs: cfg.Procs, Tap: cfg.Tap, Fair: cfg.Fair, Timeout: cfg.Timeout.String(),
		MaxHolders: maxHolders, Fenced: cfg.Memcache == "", FencesOK: true, Elapsed: elapsed.Round(time.Millisecond).String(), WaiterTable: all}
	var prev *waiter
	for i := range all {
		x := &all[i]
		switch {
		case x.Served:
			rep.Served++
		case x.Err == "":
			rep.TimedOut++
		}
		if x.Err != "" { // a failed wait, or a served waiter whose count or unlock failed
			rep.Errors++
		}
		if x.Lost {
			rep.Lost++
		}
		if !x.Served {
			continue
		}
		if prev != nil {
			if rep.Fenced && x.Fence <= prev.Fence {
				rep.FencesOK = false
			}
			if x.Enter < prev.Leave {
				rep.Overlaps++
			}
		}
		prev = x
	}
	// On memcached the demo does not see a waiter's requests, so it cannot
	// tell when the server had it in line: a waiter that gave up would count
	// as in line only once it left, and the count would be 0 by construction.
	rep.Overtaken = -1
	if cfg.Stagger > 0 && cfg.Memcache == "" {
		rep.Overtaken = overtaken(all, cfg.Timeout)
	}
	if cfg.Fair && rep.Overtaken > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("-fair, yet %d pairs were served out of arrival order", rep.Overtaken))
	}
	if rep.MaxHolders != 1 && rep.Served > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("max concurrent holders %d, want 1", rep.MaxHolders))
	}
	if !rep.FencesOK {
		rep.Failures = append(rep.Failures, "fencing numbers not strictly increasing in hold order")
	}
	if rep.Overlaps > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d holds overlapped in server time", rep.Overlaps))
	}
	if rep.Lost > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d leases lost while drinking", rep.Lost))
	}
	if rep.Errors > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d waiters failed with an error", rep.Errors))
	}
	return rep
}

// overtaken counts the pairs (a, b) where a was in line before b asked
// for the tap, and b got the tap while a was still waiting: what a
// first-come, first-served tap never does. Only pairs in a known order
// count: a's request had reached the server (a.Asked) before b called Lock
// (b.Arrive); see asked.go. b got the tap while a was still waiting if b's
// Lock returned before a's did (a served later; a mutex holds it from its
// Lock's return to past its drink), or before a's timeout could end (a
// gave up: it stayed in line at least that long).
func overtaken(all []waiter, timeout time.Duration) int {
	n := 0
	for _, b := range all {
		if !b.Served {
			continue
		}
		for _, a := range all {
			if a.Err != "" || a.Asked >= b.Arrive {
				continue
			}
			if a.Served && b.Got < a.Got || !a.Served && b.Got < a.Arrive+timeout.Microseconds() {
				n++
			}
		}
	}
	return n
}

func printReport(w io.Writer, rep report) {
	rows := [][]string{{"waiter", "proc", "result", "waited", "drank", "fence"}}
	for _, x := range rep.WaiterTable {
		res, drank, fence := "gave up", "-", "-"
		switch {
		case x.Served && x.Err != "":
			res, drank, fence = "beer, then error: "+x.Err, demo.Dur(x.Drink), strconv.FormatInt(x.Fence, 10)
		case x.Served:
			res, drank, fence = "beer", demo.Dur(x.Drink), strconv.FormatInt(x.Fence, 10)
		case x.Err != "":
			res = "error: " + x.Err
		}
		if !rep.Fenced {
			fence = "-"
		}
		rows = append(rows, []string{fmt.Sprintf("w%02d", x.ID), fmt.Sprintf("p%d", x.Proc), res, demo.Dur(x.Wait), drank, fence})
	}
	fmt.Fprintln(w)
	_ = demo.Table(w, rows)
	fmt.Fprintln(w)
	counter, clock := "Redis counter", "server TIME"
	if !rep.Fenced {
		counter, clock = "memcached counter", "local clock"
	}
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAIL"
	}
	_ = demo.Table(w, [][]string{
		{"summary", "value", "check"},
		{"served", strconv.Itoa(rep.Served), ""},
		{"timed out", strconv.Itoa(rep.TimedOut), ""},
		{"errors", strconv.Itoa(rep.Errors), verdict(rep.Errors == 0)},
		{"served + timed out", fmt.Sprintf("%d of %d", rep.Served+rep.TimedOut, rep.Waiters), verdict(rep.Served+rep.TimedOut == rep.Waiters)},
		{"max concurrent holders (" + counter + ")", strconv.FormatInt(rep.MaxHolders, 10), verdict(rep.MaxHolders == 1 || rep.Served == 0)},
		{"overlapping holds (" + clock + ")", strconv.Itoa(rep.Overlaps), verdict(rep.Overlaps == 0)},
		fenceRow(rep),
		overtakenRow(rep),
		{"elapsed", rep.Elapsed, ""},
	})
}

// serverName describes the server for reports, without its password.
func serverName(cfg config, c *demo.Conn) string {
	switch {
	case c == nil:
		return "memcached " + cfg.Memcache
	case c.Embedded:
		return "embedded miniredis " + c.URL
	}
	return demo.Redact(c.URL)
}

// fenceRow reports the fencing check, which memcached cannot have.
func fenceRow(rep report) []string {
	if !rep.Fenced {
		return []string{"fences strictly increasing in hold order", "- (memcached: no fencing)", ""}
	}
	ok := "ok"
	if !rep.FencesOK {
		ok = "FAIL"
	}
	return []string{"fences strictly increasing in hold order", strconv.FormatBool(rep.FencesOK), ok}
}

// overtakenRow reports arrival order: checked with -fair, shown otherwise.
func overtakenRow(rep report) []string {
	row := []string{"waiters overtaken by a later arrival (pairs)", strconv.Itoa(rep.Overtaken), ""}
	switch {
	case rep.Overtaken < 0 && !rep.Fenced: // memcached
		row[1] = "- (memcached: not measured)"
	case rep.Overtaken < 0:
		row[1] = "- (no -stagger)"
	case rep.Fair:
		row[2] = "ok"
		if rep.Overtaken > 0 {
			row[2] = "FAIL"
		}
	case rep.Overtaken > 0:
		row[2] = "(the mutex is not fair; see -fair)"
	}
	return row
}
