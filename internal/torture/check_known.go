package torture

// check_known.go names the library defects this checker found and that
// were reported but not fixed yet: each is a pattern of violations, so that
// a run tells them from new ones (see Run.Strict).

// A known defect is a pattern of violations with one cause in the library.
type known struct {
	name, why string
	match     func(c *checker, v Violation) bool
}

// knownDefects are the defects found and not fixed yet: none now. The four
// this checker found in issue 24 were fixed, each with a directed test:
// refresh-old (a Refresh that waited for a compute that failed or vanished
// answered with the value it passed over), refresh-refused (a Refresh
// whose store, or not-found record, was refused answered as if stored,
// leaving an older value served), invalidate-flight (a call that started
// after InvalidateTag returned joined a flight whose compute tagged before
// it) and invalidate-concurrent (a second InvalidateTag of a tag returned
// while the first still voided its values). Their violations now fail the
// run as any other.
var knownDefects = []known{}

// classify names the known defect that violation v is an instance of, or "".
func (c *checker) classify(v Violation) string {
	for _, k := range knownDefects {
		if k.match(c, v) {
			return k.name
		}
	}
	return ""
}

// Known returns the description of the known defect called name.
func Known(name string) string {
	for _, k := range knownDefects {
		if k.name == name {
			return k.why
		}
	}
	return ""
}
