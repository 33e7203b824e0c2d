package harness_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The suite runs from a module outside the repository, as a third party's
// would: a module of its own (dlm replaced by this checkout) with a driver
// written there — the standard-library RESPNode of
// conformance/respnode_test.go, taken out of its test package — and a test
// in the README's form. No server is started by hand: harness.Run starts
// one. The build takes modules from the module cache, and from the
// configured GOPROXY for what the cache lacks: the outside module loads
// dependencies' go.mod files that the repository's own (pruned) build never
// reads.
func TestOutsideModule(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil && os.Getenv("DLM_REQUIRE_REDIS") != "1" {
		t.Skipf("redis-server not found on PATH: %v", err)
	}
	t.Parallel() // its server is its own
	_, here, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(here), "..", "..")
	src, err := os.ReadFile(filepath.Join(repo, "conformance", "respnode_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	// The driver: the file up to its own tests, in a package of its own.
	driver, _, ok := strings.Cut(string(src), "// The lines that run the suite on a driver")
	if !ok || !strings.HasPrefix(driver, "package conformance_test\n") {
		t.Fatal("respnode_test.go changed shape: no package clause or no tests marker")
	}
	driver = "package respnode\n" + strings.TrimPrefix(driver, "package conformance_test\n")
	for _, imp := range []string{"\t\"testing\"\n", "\t\"github.com/dlmgo/dlm\"\n", "\t\"github.com/dlmgo/dlm/conformance\"\n", "\t\"github.com/dlmgo/dlm/conformance/family\"\n", "\t\"github.com/dlmgo/dlm/conformance/harness\"\n", "\t\"github.com/dlmgo/dlm/strategy\"\n"} {
		driver = strings.Replace(driver, imp, "", 1) // used by the tests only
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/respnode\n\ngo 1.26\n\nrequire github.com/dlmgo/dlm v0.0.0\n\nreplace github.com/dlmgo/dlm => "+repo+"\n")
	write("respnode.go", driver)
	write("respnode_test.go", `package respnode_test

import (
	"testing"

	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver"

	"example.com/respnode"
)

func TestConformance(t *testing.T) {
	harness.Run(t, func(t *testing.T, addr string) driver.Node {
		n := respnode.NewRESPNode(addr)
		t.Cleanup(n.Close)
		return n
	})
}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-run", "^TestConformance$", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off", "DLM_REQUIRE_REDIS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in a module outside the repository: %v\n%s", err, out)
	}
	for _, rule := range []string{"NoRetry", "DialDeadline", "LateReply", "FallbackSource", "DeadlineThroughoutStall", "SetNX"} {
		if !regexp.MustCompile(`(?m)^\s*--- PASS: TestConformance/` + rule + `\b`).Match(out) {
			t.Errorf("rule %s did not pass outside the repository:\n%s", rule, out)
		}
	}
}
