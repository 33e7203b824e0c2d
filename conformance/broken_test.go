package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
	case "Hangs":
		time.Sleep(time.Hour) // ignores ctx altogether
		return nil, errors.New("unreachable")
	case "DropsReply":
		_, err := call(ctx) // applied on the server; the reply is dropped
		return nil, err
	}
	return call(ctx)
}

// A brokenAbilities also implements dlm.Pipeliner and dlm.ReplicaWaiter,
// breaking them as its breakage says.
type brokenAbilities struct {
	brokenNode
	inner *goredis.Node
}

func (b brokenAbilities) EvalSHAMany(ctx context.Context, sha1 string, calls []dlm.ScriptCall) ([]dlm.ScriptResult, error) {
	res, err := b.inner.EvalSHAMany(ctx, sha1, calls)
	if b.breakage == "PipelinesOutOfOrder" && len(res) > 1 {
		res[0], res[1] = res[1], res[0] // as a driver matching replies to calls wrongly would
	}
	return res, err
}

func (b brokenAbilities) EvalSHAWait(ctx context.Context, w dlm.Wait, sha1 string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	if b.breakage == "WaitIgnoresDeadline" {
		ctx = context.WithoutCancel(ctx)
	}
	return b.inner.EvalSHAWait(ctx, w, sha1, keys, args...)
}

func (b brokenAbilities) EvalWait(ctx context.Context, w dlm.Wait, src string, keys []string, args ...string) ([]int64, dlm.Acks, error) {
	if b.breakage == "WaitIgnoresDeadline" {
		ctx = context.WithoutCancel(ctx)
	}
	return b.inner.EvalWait(ctx, w, src, keys, args...)
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
	var node dlm.Node = brokenNode{goredis.New(c), breakage}
	if breakage == "None" || breakage == "PipelinesOutOfOrder" || breakage == "WaitIgnoresDeadline" {
		node = brokenAbilities{brokenNode{goredis.New(c), breakage}, goredis.New(c)}
	}
	conformance.RunNode(t, func(*testing.T) dlm.Node { return node })
}

// Each driver broken on purpose makes the suite fail, naming the broken
// rule; the same wrapper breaking nothing passes.
func TestBrokenDriversFail(t *testing.T) {
	checkBroken(t, "TestBrokenDriver", []breakage{
		{name: "None"},
		{name: "IgnoresNX", rules: []string{"SetNX", "OneWinner"}},
		{name: "MistypesReplies", rules: []string{"IntegerReplies"}},
		{name: "IgnoresDeadline", rules: []string{"Deadline", "Cancel", "CanceledContext"}},
		{name: "DropsReply", rules: []string{"IntegerReplies", "SetNX", "ConcurrentUse"}},
		{name: "PipelinesOutOfOrder", rules: []string{"PipelinerOrder", "PipelinerNoScript"}},
		{name: "WaitIgnoresDeadline", rules: []string{"ReplicaWaiterDeadline"}},
		// The watchdog ends the binary, naming the first rule, which hangs.
		{name: "Hangs", watchdog: "2s", output: "conformance: TestBrokenDriver/NoScript did not finish within 2s"},
	})
}

type breakage struct {
	name     string
	rules    []string // rules that must fail (others may too); none: the suite must pass
	watchdog string   // DLM_CONFORMANCE_WATCHDOG for the subprocess
	output   string   // text the subprocess must print
}

// checkBroken runs test in a subprocess once per breakage and checks the verdict.
func checkBroken(t *testing.T, test string, cases []breakage) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("in the subprocess")
	}
	redistest.Binary(t, "redis-server")
	// The subprocesses mostly wait on their servers: run four at a time.
	type result struct {
		out []byte
		err error
	}
	results := make([]result, len(cases))
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tc.name)
			if tc.watchdog != "" {
				cmd.Env = append(cmd.Env, conformance.WatchdogEnv+"="+tc.watchdog)
			}
			out, err := cmd.CombinedOutput()
			results[i] = result{out, err}
		})
	}
	wg.Wait()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := results[i].out, results[i].err
			failed := failedRules(test, string(out))
			t.Logf("%s: the suite failed rules %v", tc.name, failed)
			if tc.rules == nil && tc.output == "" {
				if err != nil {
					t.Fatalf("the suite failed on a correct implementation: %v\n%s", err, out)
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed an implementation that %s (exit: %v)\n%s", tc.name, err, out)
			}
			for _, r := range tc.rules {
				if !slices.Contains(failed, r) {
					t.Errorf("the suite did not fail rule %s for an implementation that %s; failed: %v\n%s", r, tc.name, failed, out)
				}
			}
			if tc.output != "" && !strings.Contains(string(out), tc.output) {
				t.Errorf("the output lacks %q:\n%s", tc.output, out)
			}
		})
	}
}

func failedRules(test, out string) []string {
	re := regexp.MustCompile(`(?m)^\s*--- FAIL: ` + test + `/(\S+)`)
	var rules []string
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		rules = append(rules, m[1])
	}
	return rules
}
