package harness_test

import (
	"flag"
	"os"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// TestMain runs up to 8 tests at a time, not GOMAXPROCS: they mostly wait
// (on the suite's stalls and deadlines, in subprocesses), and each owns
// its servers.
func TestMain(m *testing.M) {
	flag.Parse()
	redistest.WaitingParallel(8)
	os.Exit(m.Run())
}
