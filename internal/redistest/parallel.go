package redistest

import (
	"flag"
	"strconv"
)

// WaitingParallel lets n parallel tests of the test binary run at once,
// instead of go test's default of GOMAXPROCS, unless -parallel was given.
// Call it in TestMain before m.Run.
//
// The tests that a package marks parallel spend their time waiting on
// servers of their own (a cluster forming, a failover, a reply held back,
// a lease running out), not on the CPU: root's tests used 94 s of CPU
// in 198 s, lock's 29 s in 114 s. On a 2-core machine the default let
// two of them wait at a time. Top-level parallel tests start only once
// every sequential one has ended; the parallel subtests of a sequential
// test (a suite's backends, see ForEachBackendParallel) run up to n at
// once beside each other, so a subtest that times itself (a share of a
// lock within a window, say) has three others beside it, not one.
func WaitingParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && flag.Lookup("test.parallel") != nil {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
