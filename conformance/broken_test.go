package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
)

// brokenEnv selects the broken driver TestBrokenDriver runs the suite on.
const brokenEnv = "DLM_CONFORMANCE_BROKEN"

// A brokenNode wraps a correct driver and breaks one rule on purpose.
type brokenNode struct {
	dlm.Node
	breakage string
}

func (b brokenNode) EvalSHA(ctx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	return b.do(ctx, func(ctx context.Context) ([]int64, error) { return b.Node.EvalSHA(ctx, sha1, keys, args...) })
}

func (b brokenNode) Eval(ctx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	if b.breakage == "IgnoresNX" {
		// As a driver that emulated SET without its NX option would.
		src = strings.ReplaceAll(src, "'NX', ", "")
	}
	return b.do(ctx, func(ctx context.Context) ([]int64, error) { return b.Node.Eval(ctx, src, keys, args...) })
}

func (b brokenNode) do(ctx context.Context, call func(context.Context) ([]int64, error)) ([]int64, error) {
	switch b.breakage {
	case "IgnoresDeadline":
		return call(context.WithoutCancel(ctx))
	case "MistypesReplies":
		r, err := call(ctx)
		for i := range r {
			r[i] = int64(uint32(r[i])) // read as a 32-bit unsigned integer
		}
		return r, err
	case "DropsReply":
		_, err := call(ctx) // applied on the server; the reply is dropped
		return nil, err
	}
	return call(ctx)
}

// TestBrokenDriver runs RunNode over the broken driver named by
// DLM_CONFORMANCE_BROKEN; TestBrokenDriversFail runs it in a subprocess.
func TestBrokenDriver(t *testing.T) {
	breakage := os.Getenv(brokenEnv)
	if breakage == "" {
		t.Skip(brokenEnv + " is not set; TestBrokenDriversFail runs this test in a subprocess")
	}
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	node := brokenNode{goredis.New(c), breakage}
	conformance.RunNode(t, func(*testing.T) dlm.Node { return node })
}

// Each driver broken on purpose makes the suite fail, naming the broken
// rule; the same wrapper breaking nothing passes.
func TestBrokenDriversFail(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("in the subprocess")
	}
	redistest.Binary(t, "redis-server")
	for _, tc := range []struct {
		breakage string
		rules    []string // rules that must fail, all others may
	}{
		{"None", nil},
		{"IgnoresNX", []string{"SetNX", "OneWinner"}},
		{"MistypesReplies", []string{"IntegerReplies"}},
		{"IgnoresDeadline", []string{"Deadline", "Cancel", "CanceledContext"}},
		{"DropsReply", []string{"IntegerReplies", "SetNX", "ConcurrentUse"}},
	} {
		t.Run(tc.breakage, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenDriver$", "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.breakage)
			out, err := cmd.CombinedOutput()
			failed := failedRules(string(out))
			t.Logf("breakage %s: suite failed rules %v", tc.breakage, failed)
			if tc.rules == nil {
				if err != nil {
					t.Fatalf("the suite failed on a correct driver: %v\n%s", err, out)
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed a driver that %s (exit: %v)\n%s", tc.breakage, err, out)
			}
			for _, r := range tc.rules {
				if !slices.Contains(failed, r) {
					t.Errorf("the suite did not fail rule %s for a driver that %s; failed: %v\n%s", r, tc.breakage, failed, out)
				}
			}
		})
	}
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: TestBrokenDriver/(\S+)`)

func failedRules(out string) []string {
	var rules []string
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		rules = append(rules, m[1])
	}
	return rules
}
