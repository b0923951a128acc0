package redisutil

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dogpile-go/dogpile/internal/redistest"
)

// echoScript returns its key and argument, and counts its runs in the key.
var echoScript = redis.NewScript(`redis.call('INCR', KEYS[1]) return KEYS[1] .. '=' .. ARGV[1]`)

// otherScript is a second script, loaded apart from echoScript.
var otherScript = redis.NewScript(`return 'other ' .. ARGV[1]`)

// sends records what a client sends, one entry per round trip (a command
// alone or a pipeline): its commands' names, handshakes left out.
type sends struct {
	mu   sync.Mutex
	sent []string
}

// record makes rdb's hook record what it sends into the sends it returns.
func record(rdb redis.UniversalClient) *sends {
	s := &sends{}
	rdb.AddHook(redistest.Hook{Process: s.one, Pipeline: s.many})
	return s
}

func (s *sends) one(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	s.trip([]redis.Cmder{cmd})
	return next(ctx, cmd)
}

func (s *sends) many(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	s.trip(cmds)
	return next(ctx, cmds)
}

func (s *sends) trip(cmds []redis.Cmder) {
	names := make([]string, 0, len(cmds))
	for _, c := range cmds {
		if !redistest.IsHandshake(c) {
			names = append(names, c.Name())
		}
	}
	if len(names) > 0 {
		s.mu.Lock()
		s.sent = append(s.sent, strings.Join(names, " "))
		s.mu.Unlock()
	}
}

// take returns the round trips recorded since the last take.
func (s *sends) take() (sent []string) {
	s.mu.Lock()
	sent, s.sent = s.sent, nil
	s.mu.Unlock()
	return sent
}

// TestCallRunRecoversFromNoScript: a call alone on a server without its
// script (a new server, SCRIPT FLUSH) is sent by SHA, answered NOSCRIPT,
// and sent again with its body; once the server has it, by SHA alone.
func TestCallRunRecoversFromNoScript(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	s := record(rdb)
	call := Call{Script: echoScript, Keys: []string{"k"}, Args: []any{"a"}}
	for _, want := range [][]string{{"evalsha", "eval"}, {"evalsha"}} {
		if got, err := call.Run(ctx, rdb).Text(); err != nil || got != "k=a" {
			t.Fatalf("Run = %q, %v; want k=a", got, err)
		}
		if got := s.take(); !slices.Equal(got, want) {
			t.Errorf("sent %q; want %q", got, want)
		}
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.take()
	if got, err := call.Run(ctx, rdb).Text(); err != nil || got != "k=a" {
		t.Fatalf("Run after SCRIPT FLUSH = %q, %v; want k=a", got, err)
	}
	if got := s.take(); !slices.Equal(got, []string{"evalsha", "eval"}) {
		t.Errorf("after SCRIPT FLUSH sent %q; want evalsha, then eval", got)
	}
	if n := rdb.Get(ctx, "k").Val(); n != "3" {
		t.Errorf("the script ran %s times; want 3 (a NOSCRIPT runs nothing)", n)
	}
}

// TestRunScriptsRecoversFromNoScript: a pipeline of calls costs one round
// trip on a server that has their scripts, and two on one that lacks some:
// the calls answered NOSCRIPT, and only they, go again with their body in
// one more pipeline, never one round trip per call. Each call runs once.
func TestRunScriptsRecoversFromNoScript(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	s := record(rdb)
	var calls []Call
	var want []string
	for i := range 6 {
		sc := Call{Script: echoScript, Keys: []string{fmt.Sprint("k", i)}, Args: []any{i}}
		w := fmt.Sprintf("k%d=%d", i, i)
		if i%2 == 1 {
			sc.Script, w = otherScript, fmt.Sprint("other ", i)
		}
		calls, want = append(calls, sc), append(want, w)
	}
	check := func(when string, trips ...string) {
		t.Helper()
		cmds := RunScripts(ctx, rdb, calls)
		for i, cmd := range cmds {
			if got, err := cmd.Text(); err != nil || got != want[i] {
				t.Errorf("%s: call %d = %q, %v; want %q", when, i, got, err, want[i])
			}
		}
		if got := s.take(); !slices.Equal(got, trips) {
			t.Errorf("%s: sent %q; want %q", when, got, trips)
		}
	}
	const shas = "evalsha evalsha evalsha evalsha evalsha evalsha"
	check("cold server", shas, "eval eval eval eval eval eval")
	check("warm server", shas)
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := otherScript.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	s.take()
	check("after SCRIPT FLUSH, otherScript loaded again", shas, "eval eval eval")
	for i := 0; i < 6; i += 2 {
		if n := rdb.Get(ctx, fmt.Sprint("k", i)).Val(); n != "3" {
			t.Errorf("call %d ran %s times; want 3", i, n)
		}
	}
}

// TestScriptPipelineThenAndLeft: Then's commands follow the calls in each
// pipeline, the second one too (a WAIT must follow the writes it waits
// for), and a call whose caller left is not sent again: it keeps its
// NOSCRIPT.
func TestScriptPipelineThenAndLeft(t *testing.T) {
	rdb := redistest.StartServer(t).Client(t)
	ctx := t.Context()
	s := record(rdb)
	var waits []*redis.Cmd
	p := ScriptPipeline{
		Calls: []Call{
			{Script: echoScript, Keys: []string{"stays"}, Args: []any{1}},
			{Script: echoScript, Keys: []string{"left"}, Args: []any{2}},
		},
		Then: func(p redis.Pipeliner) { waits = append(waits, p.Do(ctx, "WAIT", 0, 10)) },
		Left: func(i int) bool { return i == 1 },
	}
	cmds := p.Run(ctx, rdb)
	if got, err := cmds[0].Text(); err != nil || got != "stays=1" {
		t.Errorf("call 0 = %q, %v; want stays=1", got, err)
	}
	if err := cmds[1].Err(); !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Errorf("call 1, its caller gone = %v; want its NOSCRIPT", err)
	}
	if got, want := s.take(), []string{"evalsha evalsha wait", "eval wait"}; !slices.Equal(got, want) {
		t.Errorf("sent %q; want %q", got, want)
	}
	if n := rdb.Exists(ctx, "left").Val(); n != 0 {
		t.Error("the call whose caller left ran")
	}
	for i, w := range waits {
		if err := w.Err(); err != nil {
			t.Errorf("WAIT of pipeline %d: %v", i, err)
		}
	}
}

// TestRunScriptsOnCluster: on a cluster, whose pipeline go-redis splits
// per master, calls on every master all run after a SCRIPT FLUSH of one of
// them, and only that master's calls go again.
func TestRunScriptsOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	rdb := cluster.Client(t)
	ctx := t.Context()
	var calls []Call
	for i := range 12 {
		calls = append(calls, Call{Script: echoScript, Keys: []string{fmt.Sprint("k", i)}, Args: []any{i}})
	}
	run := func(when string) {
		t.Helper()
		for i, cmd := range RunScripts(ctx, rdb, calls) {
			if got, err := cmd.Text(); err != nil || got != fmt.Sprintf("k%d=%d", i, i) {
				t.Errorf("%s: call %d = %q, %v", when, i, got, err)
			}
		}
	}
	run("cold cluster")
	node, err := rdb.MasterForKey(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	if err := node.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s := record(rdb)
	run("one master flushed")
	sent := s.take()
	if len(sent) != 2 {
		t.Fatalf("sent %q; want two pipelines", sent)
	}
	again := strings.Fields(sent[1])
	onNode := 0
	for i := range calls {
		if n, _ := rdb.MasterForKey(ctx, fmt.Sprint("k", i)); n.Options().Addr == node.Options().Addr {
			onNode++
		}
	}
	if len(again) != onNode || again[0] != "eval" {
		t.Errorf("sent again %q; want the %d calls of the flushed master, as eval", sent[1], onNode)
	}
	for i := range calls {
		if n := rdb.Get(ctx, fmt.Sprint("k", i)).Val(); n != "2" {
			t.Errorf("call %d ran %s times; want 2", i, n)
		}
	}
}
