package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// modeReport is the outcome of one mode, summed over its processes.
type modeReport struct {
	Mode              string            `json:"mode"`
	Calls             int64             `json:"calls"`
	Errors            int64             `json:"errors"`
	FirstErr          string            `json:"first_error,omitempty"`
	Computes          int64             `json:"computes"` // the Redis counter
	Expiries          int               `json:"expiries"` // bursts of computes, per key, summed
	ComputesPerExpiry float64           `json:"computes_per_expiry"`
	MaxExpiries       int               `json:"max_expiries"` // upper bound: keys × (duration/TTL + 1)
	Hits              int64             `json:"hits"`
	Waited            int64             `json:"waited"`
	Computed          int64             `json:"computed"`
	Refreshed         int64             `json:"refreshed"` // computes in the background, for no waiting call
	HitRatio          float64           `json:"hit_ratio"`
	Throughput        float64           `json:"calls_per_second"`
	LatencyP50        time.Duration     `json:"latency_p50_ns"`
	LatencyP99        time.Duration     `json:"latency_p99_ns"`
	LatencyMax        time.Duration     `json:"latency_max_ns"`
	SteadyP99         time.Duration     `json:"latency_after_first_ttl_p99_ns"`
	SteadyMax         time.Duration     `json:"latency_after_first_ttl_max_ns"`
	WakeLagP50        time.Duration     `json:"wake_lag_p50_ns"`
	WakeLagP99        time.Duration     `json:"wake_lag_p99_ns"`
	WakeLagMax        time.Duration     `json:"wake_lag_max_ns"`
	CommandsPerCall   float64           `json:"redis_commands_per_call"`
	Library           map[string]uint64 `json:"library_stats,omitempty"`
	HotKeys           []hotKey          `json:"hot_keys,omitempty"` // Cache.HotKeys at the end, summed over processes
	Timeline          []step            `json:"timeline"`           // per 100 ms since the start
}

// hotKeysShown is how many hot keys a mode reports at the end.
const hotKeysShown = 5

type jsonReport struct {
	Server     string       `json:"server"`
	Procs      int          `json:"procs"`
	Goroutines int          `json:"goroutines"`
	Keys       int          `json:"keys"`
	Compute    string       `json:"compute"`
	TTL        string       `json:"ttl"`
	Duration   string       `json:"duration"`
	Modes      []modeReport `json:"modes"`
}

// summarize sums the processes' results. An expiry is a burst of computes of
// one key: computes that start within TTL/2 of the previous one belong to the
// same burst, since a stored value lives a whole TTL before it can be missed
// again. With one compute per expiry, computes == expiries.
func summarize(mode string, cfg config, results []result, computes int64) modeReport {
	rep := modeReport{Mode: mode, Computes: computes}
	var lat, steady, lag demo.Histogram
	var elapsed time.Duration
	var commands int64
	starts := make([][]int64, cfg.Keys)
	for _, r := range results {
		rep.Calls += r.Calls
		rep.Errors += r.Errors
		if rep.FirstErr == "" {
			rep.FirstErr = r.FirstErr
		}
		rep.Hits += r.Hits
		rep.Waited += r.Waited
		rep.Computed += r.Computed
		rep.Refreshed += r.Refreshed
		commands += r.Commands
		lat.Merge(r.Latency)
		steady.Merge(r.Steady)
		lag.Merge(r.WakeLag)
		elapsed = max(elapsed, r.Elapsed)
		for k, s := range r.Starts {
			if k < len(starts) {
				starts[k] = append(starts[k], s...)
			}
		}
		for name, v := range r.Library {
			if rep.Library == nil {
				rep.Library = map[string]uint64{}
			}
			rep.Library[name] += v
		}
	}
	gap := cfg.TTL.Microseconds() / 2
	for _, s := range starts {
		slices.Sort(s)
		for i, t := range s {
			if i == 0 || t-s[i-1] > gap {
				rep.Expiries++
			}
		}
	}
	// An early refresh comes at most a third of a TTL before expiry, so a
	// key is computed at most every 2/3 TTL in the fresh mode.
	period := cfg.TTL
	if mode == "fresh" {
		period = cfg.TTL * 2 / 3
	}
	rep.MaxExpiries = cfg.Keys * (int(cfg.Duration/period) + 1)
	if rep.Expiries > 0 {
		rep.ComputesPerExpiry = float64(rep.Computes) / float64(rep.Expiries)
	}
	if rep.Calls > 0 {
		rep.HitRatio = float64(rep.Hits) / float64(rep.Calls)
		rep.CommandsPerCall = float64(commands) / float64(rep.Calls)
	}
	if elapsed > 0 {
		rep.Throughput = float64(rep.Calls) / elapsed.Seconds()
	}
	rep.LatencyP50, rep.LatencyP99, rep.LatencyMax = lat.Quantile(0.5), lat.Quantile(0.99), lat.Max
	rep.SteadyP99, rep.SteadyMax = steady.Quantile(0.99), steady.Max
	rep.WakeLagP50, rep.WakeLagP99, rep.WakeLagMax = lag.Quantile(0.5), lag.Quantile(0.99), lag.Max
	rep.Timeline = timeline(results)
	rep.HotKeys = sumHotKeys(results)
	return rep
}

// sumHotKeys sums the processes' hot keys by key, and keeps the hottest.
func sumHotKeys(results []result) []hotKey {
	var hot []hotKey
	for _, r := range results {
		for _, h := range r.HotKeys {
			i := slices.IndexFunc(hot, func(s hotKey) bool { return s.Key == h.Key })
			if i < 0 {
				hot = append(hot, hotKey{Key: h.Key})
				i = len(hot) - 1
			}
			s := &hot[i]
			s.Reads, s.Misses, s.Computes, s.Waits = s.Reads+h.Reads, s.Misses+h.Misses, s.Computes+h.Computes, s.Waits+h.Waits
		}
	}
	slices.SortFunc(hot, func(a, b hotKey) int { return cmp.Or(cmp.Compare(b.Reads, a.Reads), cmp.Compare(a.Key, b.Key)) })
	return hot[:min(len(hot), hotKeysShown)]
}

// printHotKeys prints each mode's hot keys, if it has any.
func printHotKeys(w io.Writer, reps []modeReport) {
	for _, r := range reps {
		if len(r.HotKeys) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s: hot keys (Cache.HotKeys, summed over processes; reads estimated, hits sampled 1 in 64)\n", r.Mode)
		for _, h := range r.HotKeys {
			fmt.Fprintf(w, "  %-8s %9d reads %6d misses %5d computes %6d waits\n", h.Key, h.Reads, h.Misses, h.Computes, h.Waits)
		}
	}
}

// printTable prints the modes side by side, one column each.
func printTable(w io.Writer, reps []modeReport) error {
	header := []string{""}
	for _, r := range reps {
		header = append(header, r.Mode)
	}
	rows := [][]string{header}
	add := func(name string, f func(r modeReport) string) {
		row := []string{name}
		for _, r := range reps {
			row = append(row, f(r))
		}
		rows = append(rows, row)
	}
	lagged := func(d func(r modeReport) time.Duration) func(r modeReport) string {
		return func(r modeReport) string {
			if r.Waited == 0 {
				return "-"
			}
			return demo.Dur(d(r))
		}
	}
	add("computes (Redis counter)", func(r modeReport) string { return strconv.FormatInt(r.Computes, 10) })
	add("expiries (compute bursts)", func(r modeReport) string { return strconv.Itoa(r.Expiries) })
	add("computes per expiry", func(r modeReport) string { return fmt.Sprintf("%.2f", r.ComputesPerExpiry) })
	add("  in the background", func(r modeReport) string { return strconv.FormatInt(r.Refreshed, 10) })
	add("calls", func(r modeReport) string { return strconv.FormatInt(r.Calls, 10) })
	add("  hits", func(r modeReport) string { return strconv.FormatInt(r.Hits, 10) })
	add("  waited for another's compute", func(r modeReport) string { return strconv.FormatInt(r.Waited, 10) })
	add("  computed", func(r modeReport) string { return strconv.FormatInt(r.Computed, 10) })
	add("  errors", func(r modeReport) string { return strconv.FormatInt(r.Errors, 10) })
	add("hit ratio", func(r modeReport) string { return fmt.Sprintf("%.2f%%", 100*r.HitRatio) })
	add("throughput (calls/s)", func(r modeReport) string { return fmt.Sprintf("%.0f", r.Throughput) })
	add("latency p50", func(r modeReport) string { return demo.Dur(r.LatencyP50) })
	add("latency p99", func(r modeReport) string { return demo.Dur(r.LatencyP99) })
	add("latency max", func(r modeReport) string { return demo.Dur(r.LatencyMax) })
	add("  after the first TTL: p99", func(r modeReport) string { return demo.Dur(r.SteadyP99) })
	add("  after the first TTL: max", func(r modeReport) string { return demo.Dur(r.SteadyMax) })
	add("waiter wake lag p50", lagged(func(r modeReport) time.Duration { return r.WakeLagP50 }))
	add("waiter wake lag p99", lagged(func(r modeReport) time.Duration { return r.WakeLagP99 }))
	add("waiter wake lag max", lagged(func(r modeReport) time.Duration { return r.WakeLagMax }))
	add("Redis commands per call", func(r modeReport) string { return fmt.Sprintf("%.2f", r.CommandsPerCall) })
	var lib []string
	for _, r := range reps {
		for name := range r.Library {
			if !slices.Contains(lib, name) {
				lib = append(lib, name)
			}
		}
	}
	slices.Sort(lib)
	for _, name := range lib {
		add("Stats."+name, func(r modeReport) string {
			if r.Library == nil {
				return "-"
			}
			return strconv.FormatUint(r.Library[name], 10)
		})
	}
	if err := demo.Table(w, rows); err != nil {
		return err
	}
	for _, r := range reps {
		if r.FirstErr != "" {
			fmt.Fprintf(w, "%s: first error: %s\n", r.Mode, r.FirstErr)
		}
	}
	fmt.Fprintln(w, "\nexpiries: bursts of computes of one key; computes per expiry is 1 when only one caller in the whole fleet recomputes an expired key.")
	fmt.Fprintln(w, "in the background: computes no call waited for (fresh: refreshed before expiry, or while the stale value was served).")
	fmt.Fprintln(w, "after the first TTL: calls that began once every key had been filled; only expiries remain to wait for.")
	fmt.Fprintln(w, "wake lag: for calls that waited for another caller's compute, the time from the value being ready to the call returning.")
	printHotKeys(w, reps)
	return nil
}
