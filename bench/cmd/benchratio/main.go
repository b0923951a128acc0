// Command benchratio reads `go test -bench` output of several rounds and
// prints, for every scenario and metric, dogpile's median and each peer's
// median with the ratio between them computed round by round, so that only
// figures measured in the same run are ever compared.
//
// Benchmark names must be Benchmark<Group>/<scenario>/<library>-<procs>,
// where <library> is an import-path-like name (it may contain slashes) and
// the baseline library's name starts with "dogpile". A line "round: N"
// starts a new round (run.sh prints one before each round).
//
// A ratio is always "how many times better dogpile is": dogpile/peer for
// metrics where more is better (…/s), peer/dogpile for everything else
// (times, counts, bytes, fairness). Above 1 means dogpile is ahead. A ratio
// is left out for a round where a divisor is 0.
//
// Usage:
//
//	go run ./cmd/benchratio [-base lib] [-libs a,b,c] [-metrics m1,m2] < bench.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

var (
	libsFlag    = flag.String("libs", "dogpile/lock,dogpile/lock+fair,dogpile+near,dogpile+s2,dogpile.FetchMany,dogpile.Fetch-loop,dogpile,dogpile+stale,dogpile+early,dogpile+stale+early,dogpile+deadline,dogpile.Refresh,dogpile-own-process,dogpile-script-look,bsm/redislock,go-redsync/redsync,go-redis/cache,dtm-labs/rockscache,naive-cache-aside,setnx-poll-100ms,go-redis/get+msgpack,go-redis/mget+msgpack,go-redis/get,rueidis/DoCache", "comma-separated library names, as they end the benchmark names; longest match wins")
	metricsFlag = flag.String("metrics", "", "comma-separated metrics to show (default: all but ns/op, and fail/op when always 0)")
	noAllocs    = flag.String("noallocs", "Stampede|FetchCommands|RollingExpiry|MissToCompute|misses-", "regexp of scenarios whose B/op and allocs/op are the harness's, not the library's: not shown")
	baseFlag    = flag.String("base", "", "the library the others are compared with (default: in each scenario, the first library listed in -libs whose name starts with \"dogpile\")")
)

// A sample is one metric of one library in one scenario of one round.
type key struct {
	scenario, lib, metric string
}

func main() {
	flag.Parse()
	libs := strings.Split(*libsFlag, ",")
	// Longest first, so that "dogpile/lock+fair" wins over "dogpile/lock"
	// and "dogpile/lock" over "dogpile".
	byLen := slices.Clone(libs)
	slices.SortStableFunc(byLen, func(a, b string) int { return len(b) - len(a) })
	rounds, order, err := parse(os.Stdin, byLen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
	var want map[string]bool
	if *metricsFlag != "" {
		want = map[string]bool{}
		for _, m := range strings.Split(*metricsFlag, ",") {
			want[m] = true
		}
	}
	// Columns in the order of -libs, whatever order the rounds ran them in;
	// libraries not listed keep the order they were first seen in.
	rank := func(l string) int {
		if i := slices.Index(libs, l); i >= 0 {
			return i
		}
		return len(libs)
	}
	slices.SortStableFunc(order.libs, func(a, b string) int { return rank(a) - rank(b) })
	report(os.Stdout, rounds, order, want)
}

// parse returns one map per round, and the scenarios, libraries and metrics
// in the order first seen.
func parse(r io.Reader, libs []string) ([]map[key]float64, *seen, error) {
	var rounds []map[key]float64
	order := &seen{}
	cur := map[key]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "round:") {
			if len(cur) > 0 {
				rounds = append(rounds, cur)
			}
			cur = map[key]float64{}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		var lib, scenario string
		for _, l := range libs {
			if strings.HasSuffix(name, "/"+l) {
				lib, scenario = l, strings.TrimSuffix(name, "/"+l)
				break
			}
		}
		if lib == "" {
			continue
		}
		order.add(&order.scenarios, scenario)
		order.add(&order.libs, lib)
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%q: %v", line, err)
			}
			order.add(&order.metrics, f[i+1])
			cur[key{scenario, lib, f[i+1]}] = v
		}
	}
	if len(cur) > 0 {
		rounds = append(rounds, cur)
	}
	return rounds, order, sc.Err()
}

type seen struct{ scenarios, libs, metrics []string }

func (*seen) add(s *[]string, v string) {
	if !slices.Contains(*s, v) {
		*s = append(*s, v)
	}
}

func report(w io.Writer, rounds []map[key]float64, order *seen, want map[string]bool) {
	fmt.Fprintf(w, "%d round(s); value = median over rounds; (×r [lo–hi]) = dogpile's advantage, median of per-round ratios [min–max], >1 = dogpile better\n\n", len(rounds))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, scenario := range order.scenarios {
		var base string
		var peers []string
		for _, l := range order.libs {
			if !has(rounds, scenario, l) {
				continue
			}
			if base == "" && (l == *baseFlag || *baseFlag == "" && strings.HasPrefix(l, "dogpile")) {
				base = l
			} else {
				peers = append(peers, l)
			}
		}
		if base == "" {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s", scenario, base)
		for _, p := range peers {
			fmt.Fprintf(tw, "\t%s", p)
		}
		fmt.Fprintln(tw, "\t")
		for _, m := range order.metrics {
			if !show(m, want, rounds, scenario) {
				continue
			}
			bv := values(rounds, key{scenario, base, m})
			if len(bv) == 0 {
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s", m, num(median(bv)))
			for _, p := range peers {
				pv := values(rounds, key{scenario, p, m})
				if len(pv) == 0 {
					fmt.Fprint(tw, "\t-")
					continue
				}
				fmt.Fprintf(tw, "\t%s %s", num(median(pv)), ratios(rounds, scenario, base, p, m))
			}
			fmt.Fprintln(tw, "\t")
		}
		fmt.Fprintln(tw, "\t")
	}
	tw.Flush()
}

func has(rounds []map[key]float64, scenario, lib string) bool {
	for _, r := range rounds {
		for k := range r {
			if k.scenario == scenario && k.lib == lib {
				return true
			}
		}
	}
	return false
}

// show reports whether metric m belongs in the table for scenario.
func show(m string, want map[string]bool, rounds []map[key]float64, scenario string) bool {
	if want != nil {
		return want[m]
	}
	if m == "ns/op" {
		return false // the inverse of the throughput metric every scenario reports
	}
	if (m == "B/op" || m == "allocs/op") && *noAllocs != "" && regexp.MustCompile(*noAllocs).MatchString(scenario) {
		return false
	}
	if m == "fail/op" || m == "starved" {
		for _, r := range rounds {
			for k, v := range r {
				if k.scenario == scenario && k.metric == m && v != 0 {
					return true
				}
			}
		}
		return false
	}
	return true
}

func values(rounds []map[key]float64, k key) []float64 {
	var vs []float64
	for _, r := range rounds {
		if v, ok := r[k]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// ratios returns "(×median [min–max])" of dogpile's per-round advantage.
func ratios(rounds []map[key]float64, scenario, base, peer, m string) string {
	higherBetter := strings.HasSuffix(m, "/s")
	var rs []float64
	for _, r := range rounds {
		b, ok1 := r[key{scenario, base, m}]
		p, ok2 := r[key{scenario, peer, m}]
		if !ok1 || !ok2 {
			continue
		}
		num, den := p, b
		if higherBetter {
			num, den = b, p
		}
		if den == 0 {
			continue
		}
		rs = append(rs, num/den)
	}
	switch len(rs) {
	case 0:
		return "(×-)"
	case 1:
		return fmt.Sprintf("(×%s)", num(rs[0]))
	}
	return fmt.Sprintf("(×%s [%s–%s])", num(median(rs)), num(slices.Min(rs)), num(slices.Max(rs)))
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// num formats v with three significant digits.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}
