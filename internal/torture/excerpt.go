package torture

// excerpt.go prints the part of a history around a violation: what a
// failure shows, so that it can be read without the whole history.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

const (
	// excerptMargin is how much history around a violation its excerpt shows.
	excerptMargin = 50 * time.Millisecond
	// excerptLines bounds the ops an excerpt shows besides the culprits.
	excerptLines = 20
)

// Excerpt returns the part of h around v: the faults in effect, v's ops,
// and the other ops on the same keys or names at the time.
func Excerpt(h *History, v Violation) string {
	from, to := int64(forever), int64(0)
	for _, op := range v.Ops {
		from = min(from, op.Start)
		to = max(to, op.Start, op.End, op.Exit)
	}
	from -= int64(excerptMargin)
	to += int64(excerptMargin)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", v.Rule, v.Msg)
	for _, f := range h.Faults {
		if f.overlaps(from, to) {
			fmt.Fprintf(&b, "  %s\n", f)
		}
	}
	for _, op := range v.Ops {
		fmt.Fprintf(&b, "* %s\n", op)
	}
	subjects, caches := map[string]bool{}, map[int]bool{}
	for _, op := range v.Ops {
		for _, k := range op.Keys {
			subjects[fmt.Sprint(op.isLock(), op.Cfg, k)] = true
		}
		if !op.isLock() {
			caches[op.Cfg] = true
		}
	}
	var near []*Op
	for _, op := range h.Ops {
		if slices.Contains(v.Ops, op) || op.Start > to || (op.End != 0 && op.End < from) {
			continue
		}
		if op.Kind == KInval && caches[op.Cfg] { // an InvalidateTag has tags, not keys
			near = append(near, op)
			continue
		}
		for _, k := range op.Keys {
			if subjects[fmt.Sprint(op.isLock(), op.Cfg, k)] {
				near = append(near, op)
				break
			}
		}
	}
	sort.Slice(near, func(i, j int) bool { return near[i].Start < near[j].Start })
	for i, op := range near {
		if i == excerptLines {
			fmt.Fprintf(&b, "  ... %d more ops\n", len(near)-i)
			break
		}
		fmt.Fprintf(&b, "  %s\n", op)
	}
	return b.String()
}
