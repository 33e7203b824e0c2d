package redistest

import (
	"flag"
	"strconv"
)

// WaitingParallel raises -test.parallel to n unless the command line set
// it. Its default, GOMAXPROCS, suits tests that compute; the suites over
// real servers mostly wait (on stalled servers, deadlines, expiry: a
// package of them uses about a third of a core), so with two cores two at
// a time leaves the machine idle while a package takes minutes. A
// TestMain calls it after flag.Parse and before m.Run.
func WaitingParallel(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
