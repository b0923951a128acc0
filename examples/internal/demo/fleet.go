package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// WorkerEnv is set to "1" in the environment of a worker process. A program
// that uses [Run] must call [ServeWorker] first thing in main (and in
// TestMain) when [IsWorker] reports true.
const WorkerEnv = "DOGPILE_DEMO_WORKER"

// IsWorker reports whether this process was started by [Run] as a worker.
func IsWorker() bool { return os.Getenv(WorkerEnv) == "1" }

// A Work function does one worker's share of a demo against c and returns
// its figures. It updates progress as it goes. In a worker process it runs
// with its own client for the parent's server. c is nil when the fleet has
// no Redis (a demo on memcached names its server in the task).
type Work[T, R any] func(ctx context.Context, c *Conn, task T, progress *Counters) (R, error)

// Counters are named running totals that a worker updates and the parent
// sums for its progress line. The set of names is fixed at creation, so
// Add needs no lock.
type Counters struct {
	names []string
	m     map[string]*atomic.Int64
}

// NewCounters returns counters with the given names, all zero.
func NewCounters(names ...string) *Counters {
	c := &Counters{names: names, m: make(map[string]*atomic.Int64, len(names))}
	for _, n := range names {
		c.m[n] = new(atomic.Int64)
	}
	return c
}

// Add adds d to the counter called name; unknown names are ignored, and so
// is a nil Counters.
func (c *Counters) Add(name string, d int64) {
	if c == nil {
		return
	}
	if v := c.m[name]; v != nil {
		v.Add(d)
	}
}

// Snapshot returns the current totals.
func (c *Counters) Snapshot() map[string]int64 {
	s := make(map[string]int64, len(c.names))
	for _, n := range c.names {
		s[n] = c.m[n].Load()
	}
	return s
}

// A Fleet says where the work of [Run] runs.
type Fleet struct {
	// Conn is the server every worker uses. In-process work uses its
	// client; worker processes connect to its URL. It may be nil when the
	// tasks name their own server.
	Conn *Conn
	// Procs is the number of worker processes. With 0 or 1, the single task
	// runs in this process.
	Procs int
	// Exe is the program started as a worker; default os.Executable().
	// The program must call [ServeWorker] when [IsWorker] is true.
	Exe string
	// Counters names the progress counters workers keep.
	Counters []string
	// Progress, if set, is called once a second from the second second on,
	// with the time since the start and the counters summed over workers.
	Progress func(elapsed time.Duration, sum map[string]int64)
}

// message is one line a worker writes on its stdout.
type message struct {
	Ready    bool             `json:"ready,omitempty"`
	Progress map[string]int64 `json:"progress,omitempty"`
	Result   json.RawMessage  `json:"result,omitempty"`
	Error    string           `json:"error,omitempty"`
}

// envelope is the first line a worker reads on its stdin.
type envelope struct {
	URL      string          `json:"url"`
	Counters []string        `json:"counters"`
	Task     json.RawMessage `json:"task"`
}

// progressDelay is when the first progress line appears: short runs get
// none.
const progressDelay = 2 * time.Second

// Run runs work once per task and returns the results in task order. With
// f.Procs > 1 there must be f.Procs tasks, and each runs in its own worker
// process started from f.Exe; the workers connect and then start together.
// Otherwise the one task runs in this process.
func Run[T, R any](ctx context.Context, f Fleet, tasks []T, work Work[T, R]) ([]R, error) {
	if f.Procs <= 1 {
		if len(tasks) != 1 {
			return nil, fmt.Errorf("demo: %d tasks for one process", len(tasks))
		}
		c := NewCounters(f.Counters...)
		stop := startProgress(f.Progress, func() map[string]int64 { return c.Snapshot() })
		r, err := work(ctx, f.Conn, tasks[0], c)
		stop()
		return []R{r}, err
	}
	if len(tasks) != f.Procs {
		return nil, fmt.Errorf("demo: %d tasks for %d processes", len(tasks), f.Procs)
	}
	exe := f.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("demo: find own executable: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	ws := make([]*worker, len(tasks))
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.stop()
			}
		}
	}()
	for i, t := range tasks {
		raw, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		env := envelope{Counters: f.Counters, Task: raw}
		if f.Conn != nil {
			env.URL = f.Conn.URL
		}
		if ws[i], err = startWorker(ctx, exe, i, env); err != nil {
			return nil, err
		}
	}
	// Wait until every worker is connected, so they all start together and
	// process start-up does not count as work.
	for _, w := range ws {
		if err := w.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	for _, w := range ws {
		if err := w.send("go"); err != nil {
			return nil, w.fail(err)
		}
	}
	stop := startProgress(f.Progress, func() map[string]int64 {
		sum := make(map[string]int64)
		for _, w := range ws {
			for k, v := range w.progress() {
				sum[k] += v
			}
		}
		return sum
	})
	defer stop()

	results := make([]R, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			raw, err := w.result(ctx)
			if err == nil {
				err = json.Unmarshal(raw, &results[i])
			}
			if err != nil {
				errs[i] = err
				cancel() // the others cannot make the run whole any more
			}
		})
	}
	wg.Wait()
	// A worker killed because another failed reports only the cancellation;
	// keep the error that caused it.
	if err := errors.Join(errs...); err != nil {
		var first []error
		for _, e := range errs {
			if e != nil && !errors.Is(e, context.Canceled) {
				first = append(first, e)
			}
		}
		if len(first) > 0 {
			return nil, errors.Join(first...)
		}
		return nil, err
	}
	return results, nil
}

// startProgress calls fn once a second after progressDelay until stop is
// called; stop returns once no call is running.
func startProgress(fn func(time.Duration, map[string]int64), sum func() map[string]int64) (stop func()) {
	if fn == nil {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(progressDelay)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn(time.Since(start), sum())
				t.Reset(time.Second)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// A worker is one worker process seen from the parent.
type worker struct {
	id     int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	ready  chan struct{}
	done   chan struct{} // closed when stdout is drained and the process waited for

	mu     sync.Mutex
	latest map[string]int64
	res    json.RawMessage
	err    error
}

func startWorker(ctx context.Context, exe string, id int, env envelope) (*worker, error) {
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), WorkerEnv+"=1")
	cmd.WaitDelay = 2 * time.Second
	w := &worker{id: id, cmd: cmd, stderr: &tailBuffer{max: 4096}, ready: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = w.stderr
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start worker %d: %w", id, err)
	}
	go w.read(stdout)
	line, _ := json.Marshal(env)
	if err := w.send(string(line)); err != nil {
		return w, w.fail(err)
	}
	return w, nil
}

// read consumes the worker's messages until its stdout closes, then waits
// for the process.
func (w *worker) read(stdout io.Reader) {
	defer close(w.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var readyOnce sync.Once
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			w.setErr(fmt.Errorf("bad message %.80q: %v", sc.Text(), err))
			continue
		}
		if m.Ready {
			readyOnce.Do(func() { close(w.ready) })
		}
		if m.Error != "" {
			w.setErr(errors.New(m.Error))
		}
		w.mu.Lock()
		if m.Progress != nil {
			w.latest = m.Progress
		}
		if m.Result != nil {
			w.res = m.Result
		}
		w.mu.Unlock()
	}
	if err := w.cmd.Wait(); err != nil {
		w.setErr(err)
	}
}

func (w *worker) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

func (w *worker) progress() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest
}

func (w *worker) send(line string) error {
	_, err := io.WriteString(w.stdin, line+"\n")
	return err
}

func (w *worker) waitReady(ctx context.Context) error {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-w.ready:
		return nil
	case <-w.done:
		return w.fail(errors.New("exited before it was ready"))
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return w.fail(errors.New("not ready after 30s"))
	}
}

// result waits for the worker to finish and returns its result.
func (w *worker) result(ctx context.Context) (json.RawMessage, error) {
	select {
	case <-w.done:
	case <-ctx.Done():
		w.stop()
		return nil, ctx.Err()
	}
	w.mu.Lock()
	res, err := w.res, w.err
	w.mu.Unlock()
	if err == nil && res == nil {
		err = errors.New("exited without a result")
	}
	if err != nil {
		return nil, w.fail(err)
	}
	return res, nil
}

// fail wraps err with the worker's identity and the end of its stderr.
func (w *worker) fail(err error) error {
	msg := fmt.Sprintf("demo: worker %d: %v", w.id, err)
	if tail := strings.TrimSpace(w.stderr.String()); tail != "" {
		msg += "\nworker stderr:\n" + tail
	}
	return errors.New(msg)
}

// stop closes the worker's stdin, which ends it (it treats EOF as "the
// parent is gone"), kills it if it is still there after a moment, and
// waits for it.
func (w *worker) stop() {
	_ = w.stdin.Close()
	select {
	case <-w.done:
		return
	case <-time.After(3 * time.Second):
	}
	_ = w.cmd.Process.Kill()
	<-w.done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// ServeWorker runs this process as a worker for [Run]: it reads its task
// from stdin, connects, reports ready, waits for the start signal, runs work
// and writes the result (or the error) as JSON on stdout. It returns the
// process exit code. Closing stdin cancels the work, so a worker whose
// parent died stops.
func ServeWorker[T, R any](work Work[T, R]) int {
	in := bufio.NewReader(os.Stdin)
	out := &lockedWriter{w: os.Stdout}
	fail := func(err error) int {
		out.send(message{Error: err.Error()})
		return 1
	}
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fail(fmt.Errorf("read task: %w", err))
	}
	var env envelope
	if err := json.Unmarshal(line, &env); err != nil {
		return fail(fmt.Errorf("decode envelope: %w", err))
	}
	var task T
	if err := json.Unmarshal(env.Task, &task); err != nil {
		return fail(fmt.Errorf("decode task: %w", err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conn *Conn // none when the parent has no Redis: the task names its server
	if env.URL != "" {
		if conn, err = Connect(ctx, env.URL, "", io.Discard); err != nil {
			return fail(err)
		}
		defer conn.Close()
	}
	out.send(message{Ready: true})
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fail(fmt.Errorf("no start signal (%q, %v)", line, err))
	}
	go func() { // the parent closes stdin when it goes away
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()

	c := NewCounters(env.Counters...)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				out.send(message{Progress: c.Snapshot()})
			}
		}
	})
	r, err := work(ctx, conn, task, c)
	close(done)
	wg.Wait()
	if err != nil {
		return fail(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return fail(fmt.Errorf("encode result: %w", err))
	}
	out.send(message{Progress: c.Snapshot(), Result: raw})
	return 0
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) send(m message) {
	b, _ := json.Marshal(m)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
}
