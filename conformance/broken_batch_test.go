package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
	"github.com/dlmgo/dlm/strategy"
)

// Drivers broken on purpose in how they handle batches (issue 34), each
// caught by the batch rules: a RESPNode for the breakages of a
// connection's handling, a wrapper of the go-redis driver for the others.

// A batchBroken wraps the go-redis driver and breaks one batch rule.
type batchBroken struct {
	driver.Node
	breakage string
}

// crashRuns counts the calls of CrashesServer's nodes, which share one
// server.
var crashRuns atomic.Int64

func newBatchBroken(t *testing.T, addr, breakage string) driver.Node {
	switch breakage {
	case "KeepsPartReadConnection", "KeepsWaitConnection", "DeadlineOnlyUntilFirstReply":
		n := NewRESPNode(addr)
		n.bug = breakage
		t.Cleanup(n.Close)
		return n
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return &batchBroken{Node: goredis.New(c), breakage: breakage}
}

func (b *batchBroken) Run(ctx context.Context, calls []driver.Call) {
	switch b.breakage {
	case "WritesAfterReturn": // a large batch returns when ctx ends; its worker sets the calls when the server answers
		if ctx.Err() != nil || ctx.Done() == nil || len(calls) <= 100 {
			break
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.Node.Run(context.WithoutCancel(ctx), calls)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			nodekit.Fail(calls, ctx.Err())
		}
		return
	case "DropsArrivedReplies": // the error that cut the batch on every call, as go-redis and rueidis set it
		b.Node.Run(ctx, calls)
		if err := ctx.Err(); err != nil && len(calls) > 1 {
			for i := range calls {
				calls[i].Reply, calls[i].Err = nil, err
			}
		}
		return
	case "RerunsBatchOnNoScript": // once the batch's EVALs loaded the scripts, it runs the batch again
		b.Node.Run(ctx, calls)
		for _, c := range calls {
			if errors.Is(c.Err, driver.ErrNoScript) {
				b.Node.Run(ctx, calls)
				break
			}
		}
		return
	}
	b.Node.Run(ctx, calls)
	if b.breakage == "CrashesServer" && crashRuns.Add(1) == 300 {
		// Not a driver's bug: the server crashes mid-suite (SIGSEGV, as a
		// segfault would), which every later rule must name.
		pid := []driver.Call{{Source: "return {tonumber(string.match(redis.call('INFO', 'server'), 'process_id:(%d+)'))}"}}
		b.Node.Run(context.Background(), pid)
		if pid[0].Err == nil {
			_ = syscall.Kill(int(pid[0].Reply[0]), syscall.SIGSEGV)
		}
	}
}

// TestBrokenBatchDriver runs the suite, through harness.Run, over the
// broken driver named by DLM_CONFORMANCE_BROKEN; TestBrokenBatchDriversFail
// runs it in a subprocess.
func TestBrokenBatchDriver(t *testing.T) {
	breakage := os.Getenv(brokenEnv)
	if breakage == "" {
		t.Skip(brokenEnv + " is not set; TestBrokenBatchDriversFail runs this test in a subprocess")
	}
	harness.Run(t, func(t *testing.T, addr string) driver.Node { return newBatchBroken(t, addr, breakage) })
}

// Each driver broken on purpose in a batch rule makes the suite fail,
// naming the rule, and no rule outside the family that catches it.
func TestBrokenBatchDriversFail(t *testing.T) {
	cases := []breakage{
		// The stale grant of the cut batch reaches the next Acquire. A
		// RunWait cut while WAIT blocks leaves the wait's reply unread too.
		// Every rule runs: the suite replaces the shared node that the
		// rule left out of step, and no later rule fails for it.
		{name: "KeepsPartReadConnection", rules: []string{"PartReadBatch"}, within: []string{"PartReadBatch", "RunWaitDeadline"},
			output: "an Acquire of a key another client holds was granted", full: true},
		// The same through a RunWait cut while WAIT blocked, whose reply
		// comes once WAIT times out.
		{name: "KeepsWaitConnection", rules: []string{"PartReadBatch"}, within: []string{"PartReadBatch", "RunWaitDeadline"},
			output: "got the reply of a call that ended at its context before"},
		// radix's way: the read deadline holds only until the first bytes.
		{name: "DeadlineOnlyUntilFirstReply", rules: []string{"PartReadBatch"}, within: []string{"PartReadBatch", "RunWaitDeadline"},
			output: "the deadline must bound the whole batch"},
		{name: "WritesAfterReturn", rules: []string{"PartReadBatch"}, within: []string{"PartReadBatch"},
			output: "was written after Run returned"},
		// A server that crashes mid-suite is named as the cause.
		// Every rule runs: the 300th call crashes the server mid-suite.
		{name: "CrashesServer", output: "the suite's server crashed", watchdog: "20s", full: true},
		// The replies that arrived before the deadline cut the batch are lost.
		{name: "DropsArrivedReplies", rules: []string{"PartReadBatch"}, within: []string{"PartReadBatch"},
			output: "replies of the 2000 calls before the slow one, want at least 1600"},
		{name: "RerunsBatchOnNoScript", rules: []string{"BatchRunsOnce"}, within: []string{"BatchRunsOnce"},
			output: "ran [2] times, want 1"},
	}
	if raceEnabled {
		// The race detector reports the late writes itself, and its
		// reports of thousands of them take longer than the watchdog.
		cases = slices.DeleteFunc(cases, func(b breakage) bool { return b.name == "WritesAfterReturn" })
	}
	checkBroken(t, "TestBrokenBatchDriver", cases)
}

// RunStrategy checks Topology.Servers at its start: a server that does not
// answer fails it there, saying which, before any rule.
func TestStrategyServersChecked(t *testing.T) {
	if os.Getenv(brokenEnv) == "BadServers" {
		addr := harness.StartServer(t)
		node := NewRESPNode(addr)
		t.Cleanup(node.Close)
		conformance.RunStrategy(t,
			conformance.Topology{Nodes: func(*testing.T) []driver.Node { return []driver.Node{node} }, Servers: []string{addr, "127.0.0.1:1"}},
			func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) })
		return
	}
	if os.Getenv(brokenEnv) != "" {
		t.Skip("in the subprocess")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStrategyServersChecked$", "-test.v", "-test.count=1", "-test.timeout=1m")
	cmd.Env = redistest.SubprocessEnv(t, brokenEnv+"=BadServers")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Topology.Servers[1] (127.0.0.1:1) does not answer PING") || strings.Contains(string(out), "=== RUN   TestStrategyServersChecked/") {
		t.Fatalf("RunStrategy with a server that does not answer: %v; want it to fail at its start, naming the server\n%s", err, out)
	}
}
