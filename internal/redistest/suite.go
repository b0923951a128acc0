package redistest

import "testing"

// A Case is one behaviour test of a [Suite], run on one backend.
type Case struct {
	Name string
	Test func(t *testing.T, b Backend)
}

// A Suite is a list of behaviour tests that must hold on every deployment.
type Suite []Case

// Run runs every case of s, as a subtest, on each deployment of
// [ForEachBackend]: a fresh deployment per kind, shared by the cases (each
// case uses keys of its own). The deployments' subtests run in parallel
// with each other (at most go test's -parallel at once, and never beside
// the package's other sequential tests): a suite's cases must therefore
// touch no package-level state (a process-wide knob and the like), only
// their own deployment's keys.
func (s Suite) Run(t *testing.T) {
	t.Helper()
	forEachBackend(t, true, s.on)
}

// RunWithMiniredis runs s as Run does, and on [Miniredis] too: the
// library must also work on the demos' embedded fallback.
func (s Suite) RunWithMiniredis(t *testing.T) {
	t.Helper()
	s.Run(t)
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		s.on(t, Miniredis(t))
	})
}

func (s Suite) on(t *testing.T, b Backend) {
	for _, c := range s {
		t.Run(c.Name, func(t *testing.T) { c.Test(t, b) })
	}
}
