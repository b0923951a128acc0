// Command dogpile shows the dog-pile effect and its cure. P processes × G
// goroutines read K hot keys through a cache for a while; every value costs
// an expensive compute (a sleep, counted in Redis) and lives for a short TTL,
// so keys expire during the run and every expiry is a chance to stampede.
//
// Modes:
//
//	naive         cache-aside: GET; on a miss compute and SET. Every caller
//	              that misses computes: the dog pile.
//	singleflight  the same, with golang.org/x/sync/singleflight around the
//	              miss: one compute per key per process, still one per process.
//	dogpile       dogpile.Cache.Fetch: one compute per key across all processes;
//	              the others are woken by Redis when the value is stored.
//	fresh         dogpile with WithEarlyRefresh(1) and WithStale(TTL): one process
//	              refreshes a hot key in the background before it expires, and
//	              serves the last value if that is late; after the first fill
//	              nobody waits for a compute.
//
// Run one mode with -mode, or all four side by side with -compare:
//
//	go run ./examples/dogpile -compare
//	go run ./examples/dogpile -compare -plot stampede.svg
//	go run ./examples/dogpile -mode naive -procs 8 -g 32 -keys 2 -duration 5s
//	go run ./examples/dogpile -redis redis://:pw@host:6379/0 -compare -json
//	go run ./examples/dogpile -duration 1m -debug :6060  # and open http://localhost:6060/
//
// Without -redis or REDIS_URL it uses localhost:6379 if a Redis answers
// there, and otherwise an embedded miniredis.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/examples/internal/demo"
)

// modes in the order -compare runs them: the problem, the half cure, the
// cure, and the cure without waits at expiry.
var modes = []string{"naive", "singleflight", "dogpile", "fresh"}

// config is everything run needs; main fills it from flags.
type config struct {
	Redis      string        // URL, host:port or comma-separated cluster addresses; "" probes
	Probe      string        // address tried when Redis is empty
	Mode       string        // one of modes
	Compare    bool          // run all modes
	Procs      int           // worker processes; 1 runs in this process
	Goroutines int           // per process
	Keys       int           // hot keys
	Compute    time.Duration // cost of one compute
	TTL        time.Duration // lifetime of a cached value
	Duration   time.Duration // per mode
	Think      time.Duration // pause between a goroutine's calls
	JSON       bool
	Plot       string    // file to write the SVG picture of the run to; "" for none
	Debug      string    // address to serve dogpile's debug page at while a mode runs; "" for none
	Progress   io.Writer // progress lines; nil for none
	Exe        string    // worker executable; default this one
}

func defaultConfig() config {
	return config{
		Probe:      demo.DefaultProbe,
		Mode:       "dogpile",
		Procs:      4,
		Goroutines: 16,
		Keys:       4,
		Compute:    100 * time.Millisecond,
		TTL:        time.Second,
		Duration:   3 * time.Second,
	}
}

func main() {
	if demo.IsWorker() {
		os.Exit(demo.ServeWorker(load))
	}
	cfg := defaultConfig()
	server := demo.ServerFlags()
	flag.StringVar(&cfg.Mode, "mode", cfg.Mode, "cache strategy: "+strings.Join(modes, ", "))
	flag.BoolVar(&cfg.Compare, "compare", false, "run every mode, one after the other, and compare them")
	flag.IntVar(&cfg.Procs, "procs", cfg.Procs, "worker processes (1: this process)")
	flag.IntVar(&cfg.Goroutines, "g", cfg.Goroutines, "goroutines per process")
	flag.IntVar(&cfg.Keys, "keys", cfg.Keys, "number of hot keys")
	flag.DurationVar(&cfg.Compute, "compute", cfg.Compute, "cost of computing one value")
	flag.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "how long a cached value lives")
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each mode runs")
	flag.DurationVar(&cfg.Think, "think", 0, "pause between a goroutine's calls")
	flag.BoolVar(&cfg.JSON, "json", false, "write the results as JSON")
	flag.StringVar(&cfg.Plot, "plot", "", "write an SVG picture of computes and latency over time to `file`")
	flag.StringVar(&cfg.Debug, "debug", "", "serve dogpile's debug page (dogpile.DebugHandler) at `addr`, such as :6060, while the dogpile and fresh modes run (the first process's Cache)")
	flag.Parse()
	cfg.Redis, cfg.Probe = server()
	cfg.Progress = os.Stderr
	demo.Main("dogpile", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout) })
}

func (cfg config) check() error {
	switch {
	case !cfg.Compare && !slices.Contains(modes, cfg.Mode):
		return fmt.Errorf("unknown -mode %q; want one of %s", cfg.Mode, strings.Join(modes, ", "))
	case cfg.Procs < 1 || cfg.Goroutines < 1 || cfg.Keys < 1:
		return errors.New("-procs, -g and -keys must be at least 1")
	case cfg.Compute <= 0 || cfg.Duration <= 0 || cfg.Think < 0:
		return errors.New("-compute and -duration must be positive, -think not negative")
	case cfg.TTL < 3*cfg.Compute:
		// Expiries are counted as bursts of computes at least TTL/2 apart;
		// that needs a TTL well above the compute time.
		return fmt.Errorf("-ttl %v must be at least 3 × -compute %v", cfg.TTL, cfg.Compute)
	}
	return nil
}

func run(ctx context.Context, cfg config, w io.Writer) error {
	if err := cfg.check(); err != nil {
		return err
	}
	// The embedded-server notice goes with the progress lines under -json,
	// so that w holds nothing but JSON.
	notice := w
	if cfg.JSON {
		notice = io.Discard
		if cfg.Progress != nil {
			notice = cfg.Progress
		}
	}
	conn, err := demo.Connect(ctx, cfg.Redis, cfg.Probe, notice)
	if err != nil {
		return err
	}
	defer conn.Close()
	status := demo.NewStatusLine(cfg.Progress)
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)

	todo := []string{cfg.Mode}
	if cfg.Compare {
		todo = modes
	}
	if !cfg.JSON {
		fmt.Fprintf(w, "%d process(es) × %d goroutines × %d keys on %s; compute %v, TTL %v, %v per mode\n",
			cfg.Procs, cfg.Goroutines, cfg.Keys, serverName(conn), cfg.Compute, cfg.TTL, cfg.Duration)
	}
	var reps []modeReport
	for _, mode := range todo {
		rep, err := runMode(ctx, cfg, conn, runID, mode, status)
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		reps = append(reps, rep)
	}
	if cfg.Plot != "" {
		if err := writePlot(cfg.Plot, cfg, serverKind(conn), reps); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(notice, "wrote %s\n", cfg.Plot)
	}
	if cfg.JSON {
		return demo.WriteJSON(w, jsonReport{Server: serverName(conn), Procs: cfg.Procs, Goroutines: cfg.Goroutines, Keys: cfg.Keys,
			Compute: cfg.Compute.String(), TTL: cfg.TTL.String(), Duration: cfg.Duration.String(), Modes: reps})
	}
	fmt.Fprintln(w)
	return printTable(w, reps)
}

// runMode runs one mode on a fresh fleet and sums what the workers saw.
func runMode(ctx context.Context, cfg config, conn *demo.Conn, runID, mode string, status *demo.StatusLine) (modeReport, error) {
	prefix := "examples:dogpile:" + runID + ":" + mode + ":"
	tasks := make([]task, cfg.Procs)
	for p := range tasks {
		tasks[p] = task{Prefix: prefix, Proc: p, Mode: mode, Goroutines: cfg.Goroutines, Keys: cfg.Keys,
			Compute: cfg.Compute, TTL: cfg.TTL, Duration: cfg.Duration, Think: cfg.Think}
	}
	// One page per process, as in production; the first process serves it.
	tasks[0].Debug = cfg.Debug
	fleet := demo.Fleet{
		Conn:     conn,
		Procs:    cfg.Procs,
		Exe:      cfg.Exe,
		Counters: []string{"calls", "computes", "errors"},
		Progress: func(d time.Duration, c map[string]int64) {
			status.Set(fmt.Sprintf("%-12s %4.1fs / %v  %d calls, %d computes, %d errors",
				mode, d.Seconds(), cfg.Duration, c["calls"], c["computes"], c["errors"]))
		},
	}
	// Calls stop at the duration and each takes about a compute, so a mode
	// that runs much longer is stuck: fail it rather than hang.
	rctx, cancel := context.WithTimeout(ctx, cfg.Duration+10*cfg.Compute+time.Minute)
	defer cancel()
	results, err := demo.Run(rctx, fleet, tasks, load)
	status.Clear()
	if err != nil {
		return modeReport{}, err
	}
	computes, err := conn.Client.Get(ctx, prefix+"computes").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return modeReport{}, fmt.Errorf("read compute counter: %w", err)
	}
	conn.Client.Del(context.WithoutCancel(ctx), prefix+"computes")
	return summarize(mode, cfg, results, computes), nil
}

// serverKind names the kind of server, for the picture, which should not
// change with the port of the day.
func serverKind(c *demo.Conn) string {
	switch {
	case c.Embedded:
		return "an embedded miniredis"
	case strings.Contains(c.URL, ","):
		return "a Redis Cluster"
	}
	return "Redis"
}

// serverName describes the server for reports, without its password.
func serverName(c *demo.Conn) string {
	if c.Embedded {
		return "embedded miniredis " + c.URL
	}
	return demo.Redact(c.URL)
}
