package nodekit_test

import (
	"flag"
	"os"
	"testing"

	"github.com/dlmgo/dlm/internal/redistest"
)

// TestMain runs up to 8 tests at a time, not GOMAXPROCS: the conformance
// suites over each driver mostly wait, on stalled servers, deadlines and
// expiry, and each test owns its servers.
func TestMain(m *testing.M) {
	flag.Parse()
	redistest.WaitingParallel(8)
	os.Exit(m.Run())
}
