package harness_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

const ownEnv = "DLM_HARNESS_OWN_SUBPROCESS"

func goredisNode(t *testing.T, addr string) driver.Node {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return goredis.New(c)
}

// TestOwnSubprocess is RunNode on a server of the caller's, with Own
// called first; TestOwn runs a few of its rules in a subprocess.
func TestOwnSubprocess(t *testing.T) {
	if os.Getenv(ownEnv) == "" {
		t.Skip(ownEnv + " is not set; TestOwn runs this test in a subprocess")
	}
	harness.Own(t, goredisNode)
	other := harness.StartServer(t) // stands for a deployment of the caller's, without a fault proxy
	conformance.RunNode(t, func(t *testing.T) driver.Node { return goredisNode(t, other) })
}

// The rules that need the suite to own the server run from RunNode's entry
// point once Own was called, on Own's nodes (NoRetry cuts replies on the
// fault proxy: on the other server's nodes it would fail), on the ports of
// DLM_CONFORMANCE_PORTS.
func TestOwn(t *testing.T) {
	if os.Getenv(ownEnv) != "" {
		t.Skip("in the subprocess")
	}
	t.Parallel() // its subprocess's servers are its own
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnSubprocess$/^(NoRetry|DialDeadline|SetNX)$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = redistest.SubprocessEnv(t, ownEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("RunNode after Own: %v\n%s", err, out)
	}
	for _, rule := range []string{"NoRetry", "DialDeadline", "SetNX"} {
		if !regexp.MustCompile(`(?m)^\s*--- PASS: TestOwnSubprocess/` + rule + `\b`).Match(out) {
			t.Errorf("rule %s did not pass (or was skipped) after Own:\n%s", rule, out)
		}
	}
}

const twoServersEnv = "DLM_HARNESS_TWO_SERVERS_SUBPROCESS"

// TestTwoServersSubprocess runs RunNode with a newNode whose shared node
// talks to one server and every other node to another: the rules that
// stall the server block the second, through a node of newNode's, and the
// shared node's probes are answered at once.
func TestTwoServersSubprocess(t *testing.T) {
	if os.Getenv(twoServersEnv) == "" {
		t.Skip(twoServersEnv + " is not set; TestStallRulesNameTwoServers runs this test in a subprocess")
	}
	first, second := harness.StartServer(t), harness.StartServer(t)
	calls := 0
	conformance.RunNode(t, func(t *testing.T) driver.Node {
		calls++
		if calls == 1 {
			return goredisNode(t, first)
		}
		return goredisNode(t, second)
	})
}

// A stall rule whose probes are answered by a server it did not block says
// so, not that the machine is too slow (issue 53: under harness.Own every
// correct driver failed that way).
func TestStallRulesNameTwoServers(t *testing.T) {
	if os.Getenv(twoServersEnv) != "" {
		t.Skip("in the subprocess")
	}
	redistest.Binary(t, "redis-server")
	t.Parallel() // its subprocess's servers are its own
	cmd := exec.Command(os.Args[0], "-test.run=^TestTwoServersSubprocess$/^Deadline$", "-test.v", "-test.count=1", "-test.timeout=2m")
	cmd.Env = redistest.SubprocessEnv(t, twoServersEnv+"=1")
	out, _ := cmd.CombinedOutput()
	if !regexp.MustCompile(`(?m)^\s*--- FAIL: TestTwoServersSubprocess/Deadline\b`).Match(out) {
		t.Fatalf("the Deadline rule did not fail on nodes of two servers:\n%s", out)
	}
	if want := "never ran the script that blocked the server"; !strings.Contains(string(out), want) || strings.Contains(string(out), "too slow") {
		t.Errorf("the Deadline rule on nodes of two servers does not say so (want %q, and not that the machine is too slow):\n%s", want, out)
	}
}
