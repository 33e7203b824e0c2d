package conformance_test

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"

	"github.com/dlmgo/dlm/conformance"
	"github.com/dlmgo/dlm/conformance/harness"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/nodekit"
)

// brokenEnv selects the broken driver TestBrokenDriver runs the suite on.
const brokenEnv = "DLM_CONFORMANCE_BROKEN"

// A brokenNode wraps a correct driver and breaks one rule on purpose. It
// embeds the driver as a user's wrapper would, overriding Run, RunWait and
// Watch; breaking nothing it passes every rule, RunWait's and Watch's too.
type brokenNode struct {
	driver.Node
	breakage string

	mu         sync.Mutex // the pool lock of HealthCheckHoldsLock
	lastSource string     // FallbackWrongSource's cache

	cuts map[chan struct{}]struct{} // SharesDeadline's calls in flight, under mu
}

// newBrokenNode returns the broken driver over a new go-redis client of
// addr, or over a RESPNode for the breakages of a connection's handling.
func newBrokenNode(t *testing.T, addr, breakage string) driver.Node {
	if n := newWaitBroken(t, addr, breakage); n != nil { // broken_wait_test.go
		return n
	}
	switch breakage {
	case "ReusesConnection", "DialIgnoresContext":
		n := NewRESPNode(addr)
		n.bug = breakage
		t.Cleanup(n.Close)
		return n
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	b := &brokenNode{Node: goredis.New(c), breakage: breakage}
	if breakage == "HealthCheckHoldsLock" {
		// Every 100ms a health check pings the server, holding the pool's
		// lock until it answers.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				b.mu.Lock()
				b.Node.Run(context.Background(), []driver.Call{{Source: "return {1}"}})
				b.mu.Unlock()
			}
		}()
		t.Cleanup(func() { close(stop); <-done })
	}
	return b
}

// isServerError reports whether err is an error reply of the server.
func isServerError(err error) bool {
	var e redis.Error
	return errors.As(err, &e)
}

func (b *brokenNode) Run(ctx context.Context, calls []driver.Call) {
	switch b.breakage {
	case "IgnoresNX": // as a driver that emulated SET without its NX option would
		for i := range calls {
			calls[i].Source = strings.ReplaceAll(calls[i].Source, "'NX', ", "")
		}
	case "IgnoresDeadline":
		ctx = context.WithoutCancel(ctx)
	case "Hangs":
		time.Sleep(time.Hour) // ignores ctx altogether
	case "HealthCheckHoldsLock": // takes a connection under the pool's lock
		b.mu.Lock()
		b.mu.Unlock() //nolint:staticcheck // the wait is the point
	case "RetriesOnce": // 300ms per attempt (when ctx allows more), then once more on a timeout or a broken connection
		attempt := ctx
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 300*time.Millisecond {
			var cancel context.CancelFunc
			attempt, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
		}
		b.Node.Run(attempt, calls)
		for _, c := range calls {
			if c.Err != nil && !isServerError(c.Err) && ctx.Err() == nil {
				b.Node.Run(ctx, calls)
				break
			}
		}
		return
	case "RetriesSHAOnce": // RetriesOnce for a call of a cached script only (EVALSHA): one that times out is sent again while ctx has time
		if len(calls) != 1 || calls[0].Source != "" {
			break
		}
		attempt := ctx
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 300*time.Millisecond {
			var cancel context.CancelFunc
			attempt, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
		}
		b.Node.Run(attempt, calls)
		for _, c := range calls {
			if c.Err != nil && !isServerError(c.Err) && !errors.Is(c.Err, driver.ErrNoScript) && ctx.Err() == nil {
				b.Node.Run(ctx, calls)
				break
			}
		}
		return
	case "GraceAfterDeadline": // waits 500ms past the context's deadline for a large batch's replies still on the way
		if dl, ok := ctx.Deadline(); ok && len(calls) > 100 {
			grace, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(500*time.Millisecond))
			defer cancel()
			b.Node.Run(grace, calls)
			return
		}
	case "SharesDeadline": // as rueidis, without nodekit's check, for a call sent alone
		b.runSharing(ctx, calls)
		return
	case "FallbackWrongSource": // its own NOSCRIPT fallback, with the last source it sent
		b.Node.Run(ctx, calls)
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, c := range calls {
			switch {
			case c.Source != "":
				b.lastSource = c.Source
			case errors.Is(c.Err, driver.ErrNoScript) && b.lastSource != "":
				again := []driver.Call{{Source: b.lastSource, Keys: c.Keys, Args: c.Args}}
				b.Node.Run(ctx, again)
				calls[i].Reply, calls[i].Err = again[0].Reply, again[0].Err
			}
		}
		return
	}
	b.Node.Run(ctx, calls)
	switch b.breakage {
	case "MistypesReplies":
		for _, c := range calls {
			for i := range c.Reply {
				c.Reply[i] = int64(uint32(c.Reply[i])) // read as a 32-bit unsigned integer
			}
		}
	case "DropsReply": // applied on the server; the reply is dropped
		for i := range calls {
			calls[i].Reply = nil
		}
	case "PipelinesOutOfOrder": // as a driver matching replies to calls wrongly would
		if len(calls) > 1 {
			calls[0].Reply, calls[1].Reply = calls[1].Reply, calls[0].Reply
			calls[0].Err, calls[1].Err = calls[1].Err, calls[0].Err
		}
	case "RewordsReplies": // returns error replies in its client's words, "ERR " stripped, as rueidis words them
		for i, c := range calls {
			var re *driver.ReplyError
			if errors.As(c.Err, &re) && !errors.Is(c.Err, driver.ErrNoScript) {
				calls[i].Err = errors.New(strings.TrimPrefix(re.Error(), "ERR "))
			}
		}
	case "FailsWholeBatch": // one failed call fails them all
		for _, c := range calls {
			if c.Err != nil {
				for i := range calls {
					calls[i].Reply, calls[i].Err = nil, c.Err
				}
				break
			}
		}
	}
}

// runSharing runs calls as a client would that closes a connection when
// a call on it outlives its deadline: the calls in flight beside it fail
// with that call's context.DeadlineExceeded.
func (b *brokenNode) runSharing(ctx context.Context, calls []driver.Call) {
	own := slices.Clone(calls) // the goroutine's: it may outlive Run
	done, cut := make(chan struct{}), make(chan struct{})
	b.mu.Lock()
	if b.cuts == nil {
		b.cuts = map[chan struct{}]struct{}{}
	}
	b.cuts[cut] = struct{}{}
	b.mu.Unlock()
	go func() { b.Node.Run(ctx, own); close(done) }()
	select {
	case <-done:
		copy(calls, own)
	case <-cut:
		nodekit.Fail(calls, context.DeadlineExceeded)
	}
	b.mu.Lock()
	delete(b.cuts, cut)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		for c := range b.cuts {
			close(c)
			delete(b.cuts, c)
		}
	}
	b.mu.Unlock()
}

func (b *brokenNode) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	switch b.breakage {
	case "Unsupported":
		return driver.Acks{}, fmt.Errorf("broken: RunWait: %w", errors.ErrUnsupported)
	case "WaitIgnoresDeadline":
		ctx = context.WithoutCancel(ctx)
	}
	return b.Node.RunWait(ctx, calls, w)
}

func (b *brokenNode) Watch(ctx context.Context, channel string, notify func(string)) (func(), error) {
	switch b.breakage {
	case "Unsupported":
		return nil, fmt.Errorf("broken: Watch: %w", errors.ErrUnsupported)
	case "WatchNeverStops":
		stop, err := b.Node.Watch(ctx, channel, notify)
		if err == nil {
			stop = func() {} // the subscription outlives stop; the subprocess ends it
		}
		return stop, err
	}
	return b.Node.Watch(ctx, channel, notify)
}

// TestBrokenDriver runs the suite, through harness.Run, over the broken
// driver named by DLM_CONFORMANCE_BROKEN; TestBrokenDriversFail runs it in
// a subprocess.
func TestBrokenDriver(t *testing.T) {
	breakage := os.Getenv(brokenEnv)
	if breakage == "" {
		t.Skip(brokenEnv + " is not set; TestBrokenDriversFail runs this test in a subprocess")
	}
	harness.Run(t, func(t *testing.T, addr string) driver.Node { return newBrokenNode(t, addr, breakage) },
		harness.WithSentinel(func(t *testing.T, addrs []string, master string) (driver.Node, error) {
			n, c, err := goredis.Dial(context.Background(), nodekit.Endpoint{Sentinels: addrs, Master: master})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = c.Close() })
			return &brokenNode{Node: n, breakage: breakage}, nil
		}),
		harness.WithTLS(func(t *testing.T, addr string, cfg *tls.Config) (driver.Node, error) {
			if breakage == "SkipsVerify" { // as a driver that turned verification off to get going
				cfg = cfg.Clone()
				cfg.InsecureSkipVerify = true
			}
			n, c, err := goredis.Dial(context.Background(), nodekit.Endpoint{Addr: addr, TLS: cfg})
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { _ = c.Close() })
			return &brokenNode{Node: n, breakage: breakage}, nil
		}))
}

// Each driver broken on purpose makes the suite fail, naming the broken
// rule; the same wrapper breaking nothing passes.
func TestBrokenDriversFail(t *testing.T) {
	checkBroken(t, "TestBrokenDriver", []breakage{
		{name: "None", passed: slices.Concat(abilityRules, ownedRules, waitRules)},
		{name: "Unsupported", skipped: slices.Concat(abilityRules[3:], waitRules[:5])},
		{name: "IgnoresNX", rules: []string{"SetNX", "OneWinner"}},
		{name: "MistypesReplies", rules: []string{"IntegerReplies"}},
		{name: "IgnoresDeadline", rules: []string{"Deadline", "Cancel", "CanceledContext", "BatchContext", "DeadlineThroughoutStall", "LateReply"}},
		{name: "DropsReply", rules: []string{"IntegerReplies", "SetNX", "ConcurrentUse"}},
		{name: "PipelinesOutOfOrder", rules: []string{"BatchOrder", "BatchNoScript"}},
		{name: "FailsWholeBatch", rules: []string{"BatchNoScript"}},
		{name: "RewordsReplies", rules: []string{"PermanentErrors"}, within: []string{"PermanentErrors"}},
		{name: "WaitIgnoresDeadline", rules: []string{"RunWaitDeadline"}},
		{name: "WatchNeverStops", rules: []string{"WatchDelivers"}},
		// The watchdog ends the binary, naming the first rule, which hangs.
		{name: "Hangs", watchdog: "2s", output: "conformance: TestBrokenDriver/NoScript did not finish within 2s", run: []string{"NoScript"}},
		// Issue 15: each caught by its rule, on fresh nodes too.
		// The connection its cut broke is reused too: NoRetry cannot read its counter.
		{name: "ReusesConnection", rules: []string{"LateReply"}, within: append(slices.Clone(stallRules), "NoRetry"),
			output: "on the fresh node, the first call after the server stalled replied"},
		{name: "FallbackWrongSource", rules: []string{"FallbackSource"}, within: scriptRules,
			output: "--- FAIL: TestBrokenDriver/FallbackSource/fresh"},
		// Its rerun of the cut batch fails the calls whose replies had
		// arrived: PartReadBatch catches that too when the deadline exceeds
		// an attempt's 300ms.
		{name: "RetriesOnce", rules: []string{"NoRetry"}, within: []string{"NoRetry", "PartReadBatch"}},
		// Issue 53: NoRetry's calls of a cached script (EVALSHA) held
		// past the attempt catch it; every other rule passed it.
		{name: "RetriesSHAOnce", rules: []string{"NoRetry"}, within: []string{"NoRetry"}},
		// Issue 53: a 250ms batch that returned after 755ms passed
		// PartReadBatch, which bounded it only by the slow call's answer.
		{name: "GraceAfterDeadline", rules: []string{"PartReadBatch"}, within: []string{"PartReadBatch"}},
		// Issue 53: no rule touched TLS.
		{name: "SkipsVerify", rules: []string{"TLS"}, within: []string{"TLS"}},
		{name: "DialIgnoresContext", rules: []string{"DialDeadline"}, within: []string{"DialDeadline"}},
		{name: "HealthCheckHoldsLock", rules: []string{"DeadlineThroughoutStall"}, within: stallRules},
		{name: "SharesDeadline", rules: []string{"OwnContext"}, within: stallRules},
	})
}

// abilityRules are the rules of batches, RunWait and Watch.
var abilityRules = []string{"BatchOrder", "BatchNoScript", "BatchContext", "RunWaitReplies", "RunWaitNoScript", "RunWaitDeadline", "WatchDelivers"}

// ownedRules need harness.Run.
var ownedRules = []string{"NoRetry", "DialDeadline", "PermanentErrors", "TLS"}

// scriptRules are the rules that run new scripts through EVALSHA and a
// fallback: one family.
var scriptRules = []string{"NoScript", "ScriptRunFallsBack", "FallbackSource", "ConcurrentUse", "BatchNoScript", "BatchRunsOnce", "RunWaitNoScript"}

// stallRules are the rules that stall the server: one family.
var stallRules = []string{"Deadline", "Cancel", "BatchContext", "PartReadBatch", "DeadlineThroughoutStall", "LateReply", "OwnContext", "RunWaitDeadline", "DialDeadline", "WatchDialDeadline", "DeadlineBehindLongCall"}

type breakage struct {
	name     string
	rules    []string // rules that must fail (others may too); none: the suite must pass
	within   []string // when set, the only rules that may fail (the rules' family)
	passed   []string // rules that must pass, not skip
	skipped  []string // rules that must skip
	watchdog string   // DLM_CONFORMANCE_WATCHDOG for the subprocess
	output   string   // text the subprocess must print
	// run lists the rules the subprocess runs, when set. Otherwise it runs
	// the rules that must fail it, or, when none must (a correct wrapper,
	// one without abilities), every rule: a breakage is checked by the
	// rules meant to catch it, not by the whole suite each time. Then
	// within bounds nothing more than rules does; it says which other
	// rules may fail, and is checked where the whole suite runs (full).
	run  []string
	full bool // the subprocess runs every rule, whatever rules says
}

// selected returns the rules the subprocess runs for b, nil for every rule.
func (b breakage) selected() []string {
	switch {
	case b.full:
		return nil
	case b.run != nil:
		return b.run
	}
	return b.rules // nil: every rule
}

// runPattern returns the -test.run pattern of test's subprocess running
// only the rules sel (every rule when sel is nil).
func runPattern(test string, sel []string) string {
	p := "^" + test + "$"
	if sel == nil {
		return p
	}
	quoted := make([]string, len(sel))
	for i, r := range sel {
		quoted[i] = regexp.QuoteMeta(r)
	}
	return p + "/^(" + strings.Join(quoted, "|") + ")$"
}

// subprocesses bounds the suites run at once in subprocesses, across the
// tests that run them (which run in parallel): they mostly wait on their
// servers, but the machine may have only two cores, and the rules that
// stall a server time its calls.
var subprocesses = make(chan struct{}, 4)

// checkBroken runs test in a subprocess once per breakage and checks the verdict.
func checkBroken(t *testing.T, test string, cases []breakage) {
	t.Helper()
	if os.Getenv(brokenEnv) != "" {
		t.Skip("in the subprocess")
	}
	redistest.Binary(t, "redis-server")
	type result struct {
		out  []byte
		err  error
		took time.Duration
	}
	results := make([]result, len(cases))
	cmds := make([]*exec.Cmd, len(cases))
	for i, tc := range cases {
		cmds[i] = exec.Command(os.Args[0], "-test.run="+runPattern(test, tc.selected()), "-test.v", "-test.count=1", "-test.timeout=2m")
		cmds[i].Env = redistest.SubprocessEnv(t, brokenEnv+"="+tc.name)
		if tc.watchdog != "" {
			cmds[i].Env = append(cmds[i].Env, conformance.WatchdogEnv+"="+tc.watchdog)
		}
	}
	// The whole suite takes longest: those runs start first.
	order := make([]int, len(cases))
	for i := range order {
		order[i] = i
	}
	whole := func(i int) int {
		if cases[i].selected() == nil {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(whole(a), whole(b)) })
	// The subprocesses start now, before this test waits for its turn
	// among the parallel tests: they run in one pool with those of the
	// other tests that run them, whichever tests hold go test's -parallel
	// slots meanwhile.
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, i := range order {
			subprocesses <- struct{}{} // here, so that they start in order
			wg.Go(func() {
				defer func() { <-subprocesses }()
				start := time.Now()
				out, err := cmds[i].CombinedOutput()
				results[i] = result{out, err, time.Since(start)}
			})
		}
		wg.Wait()
	}()
	t.Parallel()
	<-done
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := results[i].out, results[i].err
			failed := rules(test, "FAIL", string(out))
			sel := tc.selected()
			if sel == nil {
				t.Logf("%s: every rule run in %v; the suite failed rules %v", tc.name, results[i].took.Round(time.Millisecond), failed)
			} else {
				t.Logf("%s: rules %v run in %v; the suite failed rules %v", tc.name, sel, results[i].took.Round(time.Millisecond), failed)
			}
			skipped := rules(test, "SKIP", string(out))
			// The subprocess ran the rules selected, each of them (a rule
			// misnamed here would otherwise be vacuously absent), and no other.
			ran := slices.Concat(failed, skipped, rules(test, "PASS", string(out)))
			for _, r := range sel {
				if !slices.Contains(ran, r) && tc.watchdog == "" {
					t.Errorf("rule %s was selected for an implementation that %s but did not run: no such rule?\n%s", r, tc.name, out)
				}
			}
			for _, r := range ran {
				if sel != nil && !slices.Contains(sel, r) {
					t.Errorf("rule %s ran for an implementation that %s, outside the rules selected (%v)\n%s", r, tc.name, sel, out)
				}
			}
			for _, r := range tc.skipped {
				if !slices.Contains(skipped, r) {
					t.Errorf("rule %s is not reported SKIP for an implementation that %s\n%s", r, tc.name, out)
				}
			}
			passed := rules(test, "PASS", string(out))
			for _, r := range tc.passed {
				if !slices.Contains(passed, r) || slices.Contains(skipped, r) {
					t.Errorf("rule %s is not reported PASS (or is skipped) for an implementation that %s\n%s", r, tc.name, out)
				}
			}
			for _, r := range failed {
				if tc.within != nil && !slices.Contains(tc.within, r) {
					t.Errorf("rule %s failed for an implementation that %s, outside the rules that catch it (%v)\n%s", r, tc.name, tc.within, out)
				}
			}
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

// rules returns the rules of test that out reports with verdict (PASS,
// FAIL or SKIP), for the rule's subtest or one of its own ("Rule/fresh").
func rules(test, verdict, out string) []string {
	re := regexp.MustCompile(`(?m)^\s*--- ` + verdict + `: ` + test + `/([^/\s]+)`)
	var rules []string
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		if !slices.Contains(rules, m[1]) {
			rules = append(rules, m[1])
		}
	}
	return rules
}
