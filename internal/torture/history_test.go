package torture

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestLedgerMergesPhases: the phases of an op, written as it goes, read
// back as one op; an op whose process died mid-way stays open.
func TestLedgerMergesPhases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	led, err := OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	op := &Op{ID: 1<<32 | 1, Proc: 1, G: 2, Kind: KMutex, Keys: []string{"m"}, Start: at(0)}
	led.Write(op)
	op.Enter, op.Fences = at(1), map[string]int64{"m": 7}
	led.Write(op)
	open := &Op{ID: 1<<32 | 2, Proc: 1, G: 3, Kind: KSet, Keys: []string{"k"}, Start: at(2), Vers: map[string]int64{"k": 9}}
	led.Write(open)
	op.Exit, op.End, op.Err = at(3), at(4), "lock: not held"
	led.Write(op)
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
	ops, err := ReadLedgers([]string{path, filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []*Op{op, open}; !reflect.DeepEqual(ops, want) {
		t.Errorf("ReadLedgers = %v; want %v", ops, want)
	}
	if !open.open() || op.open() {
		t.Errorf("open() = %v, %v; want true, false", open.open(), op.open())
	}
}

// TestPlanReplays: a seed draws the same plan every time, and another
// seed another plan.
func TestPlanReplays(t *testing.T) {
	a, b := NewPlan(42, Server), NewPlan(42, Server)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("NewPlan(42) twice:\n%s\n%s", a, b)
	}
	if c := NewPlan(43, Server); reflect.DeepEqual(a.Caches, c.Caches) {
		t.Errorf("NewPlan(42) and NewPlan(43) drew the same caches:\n%s", a)
	}
	for _, c := range a.Caches {
		if c.TTL < time.Millisecond {
			t.Errorf("cache %s: TTL %v", c.Prefix, c.TTL)
		}
	}
}

// TestHistorySaves: a saved history loads as it was.
func TestHistorySaves(t *testing.T) {
	h := history(overlap(), fault(FKillMaster, 0, 1, 2))
	h.Leaks = map[int]string{1: ""}
	path := filepath.Join(t.TempDir(), "h.json")
	if err := h.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := LoadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("LoadHistory = %+v; want %+v", got, h)
	}
}

// TestLedgerTornLastLine: a process killed mid-write leaves a torn last
// line, which is skipped; a torn line with lines after it is an error.
func TestLedgerTornLastLine(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := `{"id":1,"p":1,"g":1,"k":"get","keys":["k"]}` + "\n"
	ops, err := ReadLedgers([]string{write("last", full+`{"id":2,"p":1,"k":"ge`)})
	if err != nil || len(ops) != 1 || ops[0].ID != 1 {
		t.Errorf("a ledger with a torn last line: %d ops, %v; want the one whole op", len(ops), err)
	}
	if _, err := ReadLedgers([]string{write("middle", `{"id":2,"p":1,"k":"ge`+"\n"+full)}); err == nil {
		t.Error("a ledger with a torn line before a whole one read without error")
	}
}
