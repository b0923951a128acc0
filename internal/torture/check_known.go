package torture

// check_known.go names the library defects this checker found and that
// were reported but not fixed yet: each is a pattern of violations, so that
// a run tells them from new ones (see Run.Strict).

import "slices"

// A known defect is a pattern of violations with one cause in the library.
type known struct {
	name, why string
	match     func(c *checker, v Violation) bool
}

// knownDefects are reported in issue 24. (refresh-old, a Refresh that
// waited for a compute that failed or vanished answering with the value it
// passed over, was fixed in 41629d0: the refresh rule fails on it again.)
var knownDefects = []known{
	{"refresh-refused",
		"a Refresh whose store is refused returns the new value (or not found) with no error, and leaves the " +
			"value it was to replace served (made stale, with WithStale), so later calls return an older value: " +
			"seen when an InvalidateTag voided the compute meanwhile (of the tag it called Tag with, or of a tag " +
			"whose set held the key, which takes the compute lock) and when the lease lapsed while the server was stopped",
		(*checker).refreshRefused},
	{"invalidate-flight",
		"InvalidateTag does not drop this process's flight of a compute that tagged before it began but has not " +
			"stored yet (its key is in no tag set): calls that start after it returned join the flight and get the " +
			"voided value",
		func(_ *checker, v Violation) bool {
			if v.Rule != "invalidate" {
				return false
			}
			r, b := v.Ops[0], v.Ops[2]
			return b.Kind == KCompute && r.Proc == b.Proc && r.Kind != KGet
		}},
	{"invalidate-concurrent",
		"an InvalidateTag that runs while another of the same tag is voiding that tag's values (which it took " +
			"aside) finds the tag's set empty and returns before they are voided",
		(*checker).invalidateConcurrent},
}

// classify names the known defect that violation v is an instance of, or "".
func (c *checker) classify(v Violation) string {
	for _, k := range knownDefects {
		if k.match(c, v) {
			return k.name
		}
	}
	return ""
}

// refreshRefused: a read-after-write on a Refresh whose own compute may
// have had its store refused: voided by an InvalidateTag during the
// Refresh (of a tag the compute had called Tag with, or of a tag whose set
// held the key), or its lock lost to a fault of the server or a stop of
// its process. (So is the drop of a value a compute found not to exist.)
func (c *checker) refreshRefused(v Violation) bool {
	if v.Rule != "read-after-write" || v.Ops[1].Kind != KRefresh {
		return false
	}
	w := v.Ops[1]
	ck := ckey{w.Cfg, w.Keys[0]}
	for _, op := range c.keys[ck] {
		if op.Kind == KCompute && op.Via == w.ID &&
			(c.invalidated(w.Cfg, op.Tags, op.Tagged, w.End) != nil || c.voidedKey(ck, w.Start, w.End) != nil ||
				c.fault(lockLoss, w.Start, w.End) != nil || c.paused(w.Proc, w.Start, w.End) != nil) {
			return true
		}
	}
	return false
}

// invalidateConcurrent: an invalidate violation whose InvalidateTag ran
// while another InvalidateTag of one of its tags was running.
func (c *checker) invalidateConcurrent(v Violation) bool {
	if v.Rule != "invalidate" {
		return false
	}
	w := v.Ops[1]
	for _, o := range c.invals[w.Cfg] {
		if o != w && o.Start <= w.End && c.end(o) >= w.Start && slices.ContainsFunc(o.Tags, func(t string) bool {
			return slices.Contains(w.Tags, t)
		}) {
			return true
		}
	}
	return false
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
