package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Histogram records durations in buckets about 4.4% wide (16 per
// doubling), from 1µs up, so that the histograms of many workers can be
// merged and sent as JSON. Quantiles are accurate to a bucket; Max is exact.
// The zero value is empty and ready to use. A Histogram is not safe for
// concurrent use: keep one per goroutine and [Histogram.Merge] them.
type Histogram struct {
	Counts map[int]int64 `json:"counts,omitempty"` // bucket index → count
	N      int64         `json:"n"`
	Sum    time.Duration `json:"sum"`
	Max    time.Duration `json:"max"`
}

const bucketsPerDoubling = 16

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return int(math.Ceil(math.Log2(us) * bucketsPerDoubling))
}

// upper returns the upper bound of bucket i.
func upper(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i)/bucketsPerDoubling) * float64(time.Microsecond))
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	if h.Counts == nil {
		h.Counts = make(map[int]int64)
	}
	h.Counts[bucketOf(d)]++
	h.N++
	h.Sum += d
	h.Max = max(h.Max, d)
}

// Merge adds o's durations to h.
func (h *Histogram) Merge(o Histogram) {
	if h.Counts == nil {
		h.Counts = make(map[int]int64)
	}
	for b, n := range o.Counts {
		h.Counts[b] += n
	}
	h.N += o.N
	h.Sum += o.Sum
	h.Max = max(h.Max, o.Max)
}

// Quantile returns the duration below which a fraction q of the recorded
// durations fall (the upper bound of its bucket, capped at Max), or 0 for
// an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.N)))
	rank = max(rank, 1)
	lo, hi := math.MaxInt, math.MinInt
	for b := range h.Counts {
		lo, hi = min(lo, b), max(hi, b)
	}
	var seen int64
	for b := lo; b <= hi; b++ {
		if seen += h.Counts[b]; seen >= rank {
			return min(upper(b), h.Max)
		}
	}
	return h.Max
}

// Mean returns the average duration, or 0 for an empty histogram.
func (h *Histogram) Mean() time.Duration {
	if h.N == 0 {
		return 0
	}
	return h.Sum / time.Duration(h.N)
}

// A CmdCounter is a [redis.Hook] that counts the commands a client sends,
// one per command, pipelined or not. Commands that set up a new connection
// (HELLO, AUTH, SELECT, CLIENT, READONLY) are not counted: they are paid once
// per pooled connection, not per call. Add it with client.AddHook.
type CmdCounter struct{ n atomic.Int64 }

// Load returns the number of commands sent so far.
func (c *CmdCounter) Load() int64 { return c.n.Load() }

func counted(cmd redis.Cmder) int64 {
	switch cmd.Name() {
	case "hello", "auth", "select", "client", "readonly":
		return 0
	}
	return 1
}

// DialHook implements [redis.Hook].
func (c *CmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements [redis.Hook].
func (c *CmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(counted(cmd))
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements [redis.Hook].
func (c *CmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.n.Add(counted(cmd))
		}
		return next(ctx, cmds)
	}
}

// Table writes rows as aligned columns; the first row is the header.
func Table(w io.Writer, rows [][]string) error {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	for i, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
		if i == 0 {
			dashes := make([]string, len(r))
			for j, c := range r {
				dashes[j] = strings.Repeat("-", max(len(c), 3))
			}
			fmt.Fprintln(tw, strings.Join(dashes, "\t"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lines := strings.SplitAfter(buf.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \n") + "\n"
	}
	_, err := io.WriteString(w, strings.Join(lines[:len(lines)-1], ""))
	return err
}

// WriteJSON writes v to w as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Dur formats d for a table: 3 significant digits in a fitting unit.
func Dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// A StatusLine writes progress lines: rewritten in place on a terminal, one
// per call elsewhere. A nil *StatusLine writes nothing.
type StatusLine struct {
	w     io.Writer
	tty   bool
	dirty bool
}

// NewStatusLine returns a StatusLine writing to w, or nil if w is nil.
func NewStatusLine(w io.Writer) *StatusLine {
	if w == nil {
		return nil
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &StatusLine{w: w, tty: tty}
}

// Set shows line.
func (s *StatusLine) Set(line string) {
	if s == nil {
		return
	}
	if s.tty {
		fmt.Fprintf(s.w, "\r\033[K%s", line)
		s.dirty = true
		return
	}
	fmt.Fprintln(s.w, line)
}

// Clear removes the line on a terminal, before other output.
func (s *StatusLine) Clear() {
	if s == nil || !s.dirty {
		return
	}
	fmt.Fprint(s.w, "\r\033[K")
	s.dirty = false
}

// RowLabels returns the first column of every row of the tables [Table]
// wrote into text (the rows under a dashed line, up to a blank line): what
// a sample run in a README must show, whatever its figures.
func RowLabels(text string) []string {
	var labels []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "---"):
			in = true
		case strings.TrimSpace(line) == "":
			in = false
		case in:
			label, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
			labels = append(labels, label)
		}
	}
	return labels
}
