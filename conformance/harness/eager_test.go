package harness_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/internal/redistest"
)

// eagerSkips are the rules that may skip for the eager driver, with why:
// what the server the harness starts cannot do.
var eagerSkips = map[string]string{}

func init() {
	// The harness runs RunWaitAOF on Valkey 8.0 where the server lacks
	// WAITAOF, when valkey-server is installed.
	if _, err := redistest.LookupBuild(redistest.Valkey80); err != nil {
		eagerSkips["RunWaitAOF"] = "WAITAOF needs Redis 7.2 or later, and no valkey-server is installed: " + err.Error()
	}
}

// TestEagerDriver runs, whole, both layouts the documentation gives for
// running the suite (harness.Run; harness.Own before conformance.RunNode
// on a server of the author's) on a driver written as a third party would,
// in a module of its own (testdata/eagerdriver: its own go.mod, dlm
// replaced by this checkout, built with GOWORK=off as a driver's
// repository would be), whose constructor dials a pool of 16 connections
// before the rule that uses it begins: every rule must pass in both
// (issue 53: every correct driver failed the stall rules under Own, and a
// pool dialled just before DialDeadline met the fault proxy's race).
func TestEagerDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite twice (about a minute)")
	}
	redistest.Binary(t, "redis-server")
	t.Parallel() // its servers are its own
	_, here, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(here), "testdata", "eagerdriver")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout=7m", ".")
	cmd.Dir = dir
	cmd.Env = redistest.SubprocessEnv(t, "GOWORK=off", "GOFLAGS=-mod=mod", "DLM_REQUIRE_REDIS=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("both layouts, every rule: %v", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("the suite failed a correct, eagerly dialling driver: %v\n%s", err, out)
	}
	for _, layout := range []string{"TestRun", "TestOwn"} {
		for _, rule := range conformance.NodeRules() {
			top := regexp.MustCompile(`(?m)^\s*--- (PASS|SKIP|FAIL): ` + layout + `/` + rule + ` \(`).FindSubmatch(out)
			inner := regexp.MustCompile(`(?m)^\s*--- SKIP: ` + layout + `/` + rule + `/(fresh|shared) \(`).Match(out)
			switch {
			case top == nil:
				t.Errorf("%s: rule %s did not run\n%s", layout, rule, out)
			case string(top[1]) != "PASS" || inner:
				if why, ok := eagerSkips[rule]; ok && string(top[1]) != "FAIL" {
					t.Logf("%s: rule %s skipped: %s", layout, rule, why)
					continue
				}
				t.Errorf("%s: rule %s: %s (or skipped on a node), want PASS on both nodes\n%s", layout, rule, top[1], out)
			}
		}
	}
}
