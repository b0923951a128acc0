package torture

// ledger.go writes and reads the workers' ledgers: the files in which each
// records its ops as they go.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// A Ledger is a worker process's side of the history: an append-only
// file, one JSON line per phase of an op, each written by one write(2)
// so that the lines of concurrent goroutines do not mix and everything
// written survives a SIGKILL of the process.
type Ledger struct {
	mu sync.Mutex
	f  *os.File
}

// OpenLedger opens (creating) the ledger file at path.
func OpenLedger(path string) (*Ledger, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Ledger{f: f}, nil
}

// Write appends op's phase: the fields set so far.
func (l *Ledger) Write(op *Op) {
	b, err := json.Marshal(op)
	if err != nil {
		panic(err) // an Op always encodes
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(b); err != nil {
		panic(fmt.Sprintf("torture: ledger: %v", err))
	}
}

// Close closes the file.
func (l *Ledger) Close() error { return l.f.Close() }

// ReadLedgers reads the ledger files and merges the phases of each op:
// a later phase's fields are decoded over the earlier ones'.
func ReadLedgers(paths []string) ([]*Op, error) {
	byID := map[int64]*Op{}
	for _, path := range paths {
		if err := readLedger(path, byID); err != nil {
			return nil, err
		}
	}
	ops := make([]*Op, 0, len(byID))
	for _, op := range byID {
		ops = append(ops, op)
	}
	sortOps(ops)
	return ops, nil
}

func readLedger(path string, byID map[int64]*Op) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil // a process that never got to write
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var torn string // a line that did not decode: the file's last, or an error
	for sc.Scan() {
		if torn != "" {
			return fmt.Errorf("torture: ledger %s: a line that does not decode: %q", path, torn)
		}
		var head struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &head); err != nil {
			// A process killed mid-write leaves a torn last line: its
			// phase never happened as far as the history goes.
			torn = sc.Text()
			continue
		}
		op := byID[head.ID]
		if op == nil {
			op = &Op{}
			byID[head.ID] = op
		}
		if err := json.Unmarshal(sc.Bytes(), op); err != nil {
			return fmt.Errorf("torture: ledger %s: %v", path, err)
		}
	}
	return sc.Err()
}
