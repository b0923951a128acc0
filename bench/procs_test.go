package benchmarks

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
)

// A jsonChild is this test binary re-executed to run one test function as
// one process of a multi-process benchmark, driven by JSON values over its
// stdin and stdout.
type jsonChild struct {
	cmd *exec.Cmd
	enc *json.Encoder
	dec *json.Decoder
}

// startJSONChildren starts n children that run the test named test with
// env added to theirs. b.Cleanup closes their stdin (they return when it
// ends) and waits for them.
func startJSONChildren(b *testing.B, n int, test string, env ...string) []jsonChild {
	b.Helper()
	children := make([]jsonChild, n)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.bench=^$", "-test.count=1")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { in.Close(); cmd.Wait() })
		children[i] = jsonChild{cmd, json.NewEncoder(in), json.NewDecoder(bufio.NewReader(out))}
	}
	return children
}

// exchange sends round to every child and returns their answers, in the
// children's order.
func exchange[R any](b *testing.B, children []jsonChild, round any) []R {
	b.Helper()
	for _, c := range children {
		if err := c.enc.Encode(round); err != nil {
			b.Fatalf("send round: %v", err)
		}
	}
	res := make([]R, len(children))
	for i, c := range children {
		if err := c.dec.Decode(&res[i]); err != nil {
			b.Fatalf("read a child's result: %v", err)
		}
	}
	return res
}

// serveRounds is the child's side of exchange: it answers each round the
// parent sends with do's result, until the parent closes stdin.
func serveRounds[Q, R any](t *testing.T, do func(Q) R) {
	dec, enc := json.NewDecoder(bufio.NewReader(os.Stdin)), json.NewEncoder(os.Stdout)
	for {
		var q Q
		if err := dec.Decode(&q); err != nil {
			return // the parent closed stdin
		}
		if err := enc.Encode(do(q)); err != nil {
			t.Fatal(err)
		}
	}
}
