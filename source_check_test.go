package dogpile_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dogpile-go/dogpile"
	"github.com/dogpile-go/dogpile/internal/redistest"
)

// A source is the database behind a Cache in these tests: a map, with the
// keys verify was called with.
type source struct {
	mu       sync.Mutex
	rows     map[string]string
	verified []string
	hold     chan struct{} // if set, verify waits for it to close
}

func newSource(rows map[string]string) *source { return &source{rows: rows} }

func (s *source) write(key, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[key] = v
}

func (s *source) compute(key string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.rows[key], nil
	}
}

func (s *source) verify(ctx context.Context, key string) (string, error) {
	if s.hold != nil {
		select {
		case <-s.hold:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verified = append(s.verified, key)
	v, ok := s.rows[key]
	if !ok {
		return "", dogpile.ErrNotFound
	}
	return v, nil
}

func (s *source) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.verified...)
}

// newSourceChecked returns a Cache on a server of its own, with the source
// check of db at a fraction of 1 and a short delay, and a near tier if
// near.
func newSourceChecked(t *testing.T, db *source, near bool, seen *inconsistencies, opts ...dogpile.Option) *dogpile.Cache[string] {
	t.Helper()
	s := redistest.StartServer(t)
	opts = append(opts, dogpile.WithSourceCheck(1, db.verify), dogpile.WithSourceDelay(20*time.Millisecond), dogpile.WithObserver(seen.observe))
	var c *dogpile.Cache[string]
	if near {
		c = dogpile.NewNearCache[string](t, s.Client(t), 100, opts...)
	} else {
		c = dogpile.New[string](s.Client(t), append(opts, prefix(t))...)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSourceCheckFindsMissingDelete: the database row changed and nobody
// deleted the cached value. A sampled hit, of Fetch, FetchMany or Get from
// Redis or of Fetch from the near tier, disagrees with the source, and
// Redis still holds the value after the delay: it is counted and reported
// with its key. A hit of a key whose row did not change is not.
func TestSourceCheckFindsMissingDelete(t *testing.T) {
	hits := map[string]func(*testing.T, *dogpile.Cache[string], string) string{
		"Fetch": dogpile.FetchValue[string],
		"near":  dogpile.FetchNear[string], // fills the tier first
		"FetchMany": func(t *testing.T, c *dogpile.Cache[string], key string) string {
			m, err := c.FetchMany(t.Context(), []string{key}, time.Minute, redistest.NoComputeMany[string])
			if err != nil {
				t.Fatal(err)
			}
			return m[key]
		},
		"Get": func(t *testing.T, c *dogpile.Cache[string], key string) string {
			v, err := c.Get(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
	}
	for name, hit := range hits {
		t.Run(name, func(t *testing.T) {
			db := newSource(map[string]string{"k": "v1", "same": "s"})
			var seen inconsistencies
			c := newSourceChecked(t, db, name == "near", &seen)
			ctx := t.Context()
			for _, k := range []string{"k", "same"} {
				if _, err := c.Fetch(ctx, k, time.Minute, db.compute(k)); err != nil {
					t.Fatal(err)
				}
			}
			db.write("k", "v2") // no Delete: the bug the check finds
			hit(t, c, "k")
			hit(t, c, "same")
			settleChecks(t, c)
			before := c.Stats()
			// One hit of each (from the tier, for near), checked.
			if v := hit(t, c, "k"); v != "v1" {
				t.Fatalf("hit = %q; want the cached v1", v)
			}
			hit(t, c, "same")
			settleChecks(t, c)
			st := c.Stats()
			if st.SourceSampled != before.SourceSampled+2 || st.SourceInconsistent != before.SourceInconsistent+1 {
				t.Errorf("SourceSampled, SourceInconsistent = %d, %d after two hits; want %d, %d",
					st.SourceSampled, st.SourceInconsistent, before.SourceSampled+2, before.SourceInconsistent+1)
			}
			want := strings.TrimSuffix(strings.Repeat("k near=false ", int(st.SourceInconsistent)), " ")
			if got := seen.String(); got != "["+want+"]" {
				t.Errorf("EventInconsistent keys = %s; want [%s]", got, want)
			}
		})
	}
}

// TestSourceCheckDeleteNotCounted: the row changed after the hit served
// it, and the cache was told (Delete) as it should be. verify, called
// after both, disagrees with the value served, but Redis no longer holds
// it: the value's age explains the mismatch, which is not counted.
func TestSourceCheckDeleteNotCounted(t *testing.T) {
	db := newSource(map[string]string{"k": "v1"})
	db.hold = make(chan struct{})
	var seen inconsistencies
	c := newSourceChecked(t, db, false, &seen)
	ctx := t.Context()
	if _, err := c.Fetch(ctx, "k", time.Minute, db.compute("k")); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchValue(t, c, "k") // the hit checked
	db.write("k", "v2")
	if err := c.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	close(db.hold)
	redistest.Eventually(t, "the check", func() bool { return c.Stats().SourceSampled == 1 })
	settleChecks(t, c)
	if st := c.Stats(); st.SourceInconsistent != 0 {
		t.Errorf("SourceInconsistent = %d; want 0 (events %s)", st.SourceInconsistent, seen.String())
	}
}

// TestSourceCheckNotFound: a not-found tombstone agrees with a verify that
// returns ErrNotFound, and disagrees with one that finds the row.
func TestSourceCheckNotFound(t *testing.T) {
	db := newSource(map[string]string{})
	var seen inconsistencies
	c := newSourceChecked(t, db, false, &seen, dogpile.WithNegativeTTL(time.Minute))
	ctx := t.Context()
	notFound := func(context.Context) (string, error) { return "", dogpile.ErrNotFound }
	for _, k := range []string{"gone", "added"} {
		for range 2 { // a miss stores the tombstone, a hit serves it
			if _, err := c.Fetch(ctx, k, time.Minute, notFound); err == nil {
				t.Fatalf("Fetch(%q) found a value", k)
			}
		}
	}
	db.write("added", "v") // inserted, no Delete of the tombstone
	redistest.Eventually(t, "two checks", func() bool { return c.Stats().SourceSampled >= 2 })
	settleChecks(t, c)
	if got, want := seen.String(), "[added near=false]"; got != want {
		t.Errorf("EventInconsistent keys = %s; want %s", got, want)
	}
}

// TestSourceCheckSkipsStaleHits: a stale hit (WithStale) is knowingly old,
// from Fetch or Get: never checked. A fresh hit after it is.
func TestSourceCheckSkipsStaleHits(t *testing.T) {
	db := newSource(map[string]string{"stale": "s", "fresh": "f"})
	var seen inconsistencies
	c := newSourceChecked(t, db, false, &seen, dogpile.WithStale(time.Hour))
	ctx := t.Context()
	for _, k := range []string{"stale", "fresh"} {
		if err := c.Set(ctx, k, db.rows[k], time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Expire(ctx, "stale"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "stale"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "stale", time.Minute, db.compute("stale")); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Stale != 1 {
		t.Fatalf("Stats().Stale = %d; want 1: the Fetch's hit was stale", st.Stale)
	}
	dogpile.FetchValue(t, c, "fresh")
	redistest.Eventually(t, "the fresh hit's check", func() bool { return c.Stats().SourceSampled >= 1 })
	settleChecks(t, c)
	if got := db.keys(); strings.Join(got, ",") != "fresh" {
		t.Errorf("verify called with %q; want only the fresh hit's key", got)
	}
}

// TestSourceCheckRateCap: at a fraction of 1, hits read from Redis make at
// most CheckRate checks a second (CheckBurst at once).
func TestSourceCheckRateCap(t *testing.T) {
	db := newSource(map[string]string{"k": "v"})
	var seen inconsistencies
	c := newSourceChecked(t, db, false, &seen)
	if _, err := c.Fetch(t.Context(), "k", time.Minute, db.compute("k")); err != nil {
		t.Fatal(err)
	}
	checksCapped(t, c, "k", func(st dogpile.Stats) uint64 { return st.SourceSampled })
}

// TestSourceCheckCloseEndsChecker: Close ends the checking goroutine, also
// while verify runs, and leaves no goroutine behind.
func TestSourceCheckCloseEndsChecker(t *testing.T) {
	s := redistest.StartServer(t)
	raw := s.Client(t)
	before := goleak.IgnoreCurrent()
	var called atomic.Bool
	verify := func(ctx context.Context, key string) (string, error) {
		called.Store(true)
		<-ctx.Done() // a slow source: Close must end it
		return "", ctx.Err()
	}
	c := dogpile.New[string](raw, prefix(t), dogpile.WithSourceCheck(1, verify), dogpile.WithSourceDelay(time.Millisecond))
	if _, err := c.Fetch(t.Context(), "k", time.Minute, redistest.Constant("v")); err != nil {
		t.Fatal(err)
	}
	dogpile.FetchValue(t, c, "k")
	redistest.Eventually(t, "verify to be called", called.Load)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, before)
}

// TestCheckOptionsPanic: a fraction outside (0, 1], a nil verify, or a
// verify of another type than the Cache's are programmer errors, named.
func TestCheckOptionsPanic(t *testing.T) {
	verify := func(context.Context, string) (string, error) { return "", nil }
	for name, f := range map[string]func(){
		"WithConsistencySampling(0)":    func() { dogpile.WithConsistencySampling(0) },
		"WithConsistencySampling(-1)":   func() { dogpile.WithConsistencySampling(-1) },
		"WithConsistencySampling(1.5)":  func() { dogpile.WithConsistencySampling(1.5) },
		"WithConsistencySampling(NaN)":  func() { dogpile.WithConsistencySampling(math.NaN()) },
		"WithSourceCheck(0)":            func() { dogpile.WithSourceCheck(0, verify) },
		"WithSourceCheck(+Inf)":         func() { dogpile.WithSourceCheck(math.Inf(1), verify) },
		"WithSourceCheck(nil verify)":   func() { dogpile.WithSourceCheck[string](1, nil) },
		"WithSourceCheck's verify type": func() { dogpile.New[int](redistest.NopClient(t), dogpile.WithSourceCheck(1, verify)) },
	} {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			f()
			return ""
		}()
		if option, _, _ := strings.Cut(name, "("); !strings.Contains(msg, strings.TrimSuffix(option, "'s verify type")) {
			t.Errorf("%s: panic %q; want one naming the option", name, msg)
		}
	}
}

// TestSourceCheckCluster: on a Cluster, a round of checks reads keys that
// live on every master in one pipeline (a round trip per node); the keys
// whose rows changed without a Delete are found, each once, and no other.
// As many keys as checks may begin at once, less two: a hit beyond the
// rate cap is not checked.
func TestSourceCheckCluster(t *testing.T) {
	t.Parallel() // its own cluster; touches no package state
	cl := redistest.StartCluster(t, 3)
	rows := map[string]string{}
	for i := range dogpile.CheckBurst - 2 { // checks that may begin at once
		rows[fmt.Sprint("k", i)] = "v1"
	}
	db := newSource(rows)
	var seen inconsistencies
	c := dogpile.New[string](cl.Client(t), prefix(t), dogpile.WithSourceCheck(1, db.verify),
		dogpile.WithSourceDelay(20*time.Millisecond), dogpile.WithObserver(seen.observe))
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	keys := slices.Sorted(maps.Keys(rows))
	for _, k := range keys {
		if _, err := c.Fetch(ctx, k, time.Minute, db.compute(k)); err != nil {
			t.Fatal(err)
		}
	}
	settleChecks(t, c)
	var changed []string
	for i, k := range keys {
		if i%3 == 0 {
			db.write(k, "v2") // no Delete
			changed = append(changed, k)
		}
	}
	before := c.Stats()
	if _, err := c.FetchMany(ctx, keys, time.Minute, redistest.NoComputeMany[string]); err != nil {
		t.Fatal(err)
	}
	settleChecks(t, c)
	st := c.Stats()
	if got := st.SourceSampled - before.SourceSampled; got != uint64(len(keys)) {
		t.Errorf("%d hits checked; want all %d (a check's read failing on another node drops it)", got, len(keys))
	}
	if got := st.SourceInconsistent - before.SourceInconsistent; got != uint64(len(changed)) {
		t.Errorf("%d hits inconsistent; want %d, the rows written without a Delete", got, len(changed))
	}
	var want []string
	for _, k := range changed {
		want = append(want, k+" near=false")
	}
	if got := seen.String(); got != "["+strings.Join(want, " ")+"]" {
		t.Errorf("EventInconsistent keys = %s; want [%s]", got, strings.Join(want, " "))
	}
}
