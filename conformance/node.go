package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// RunNode checks that the Nodes newNode returns keep every rule of the
// driver.Node contract (docs/driver-contract.md has them all in one place), each in a
// subtest named after the rule. Every Run must
// set exactly one of each call's Reply (non-nil, empty for an empty array)
// and Err; a call that runs one script is "Eval" in the rules'
// descriptions when it sends the source and "EvalSHA" when it sends the
// digest.
//
// docs/driver-contract.md lists every rule, with what it checks, under
// "Every rule" (NodeRules returns their names); a test fails when the list
// and the rules differ.
//
// Seven rules need the suite to own the server, its replica and the path to
// it (NoRetry, DialDeadline, PermanentErrors, RunWaitFrozenReplica,
// WatchResubscribes, WatchDialDeadline, TLS), and run only under package
// conformance/harness (skipped, saying so, otherwise): harness.Run runs
// every rule on one server it starts; harness.Own, called before RunNode,
// runs these seven on a server it starts and the others on the nodes given
// to RunNode (a Cluster, say). Both take the ports to use from an option
// or DLM_CONFORMANCE_PORTS (see package harness). The RunWait and Watch
// rules are skipped, saying so, when the first RunWait or Watch returns an
// error matching errors.ErrUnsupported.
//
// Every rule runs on two Nodes: one newNode returned for this rule (fresh)
// and one it returned once for all rules (shared), which carries whatever
// the earlier rules left in it (after a rule failed, newNode is called for
// a new shared node, so that one bug does not fail every later rule). Rules whose checks are cheap run as two
// subtests, "Rule/fresh" and "Rule/shared"; the rules that stall the server
// probe both nodes within one stall. newNode is called with the test given
// to RunNode for the shared node and with each rule's subtest for the
// fresh ones; it may return Nodes over one shared client and server (the
// suite then checks less), and may use t (t.Cleanup, t.Fatal, t.Skip). See
// the package documentation about the server being blocked.
func RunNode(t *testing.T, newNode func(t *testing.T) driver.Node) {
	t.Helper()
	run := runID()
	tr := transport.Lookup(t)
	top := t
	shared := newNode(t)
	if shared == nil {
		t.Fatal("newNode returned nil")
	}
	var ownedShared driver.Node // the shared node of the owned rules under harness.Own
	for _, rule := range nodeRules {
		ok := subtest(t, rule.name, func(t *testing.T) {
			if rule.owned && tr == nil {
				t.Skip("this rule needs the suite to own the server and the path to it: run the suite with conformance/harness.Run, or call harness.Own before RunNode")
			}
			serverAlive(t, tr, false)
			t.Cleanup(func() { serverAlive(t, tr, true) })
			factory, sh := newNode, shared
			if rule.owned && tr.NewNode != nil {
				if ownedShared == nil {
					ownedShared = tr.NewNode(top)
				}
				factory, sh = tr.NewNode, ownedShared
			}
			fresh := factory(t)
			if fresh == nil || sh == nil {
				t.Fatal("newNode returned nil")
			}
			// The rule's nodes talk to the transport's server under
			// harness.Run, and under harness.Own only for the owned rules:
			// the others' nodes talk to a server of the caller's, which the
			// suite may block only through a node of its own.
			onTr := tr != nil && (tr.NewNode == nil || rule.owned)
			c := &nodeCase{Node: fresh, keyspace: newKeyspace(run), run: run, which: "fresh", tr: tr, onTr: onTr, newNode: factory}
			c.other = c.on(sh, "shared")
			if rule.both {
				c.other.keyspace = c.keyspace // one server (Cluster master) for both
				rule.run(t, c)
				return
			}
			for _, n := range []*nodeCase{c, c.other} {
				t.Run(n.which, func(t *testing.T) { rule.run(t, n) })
			}
		})
		if !ok {
			// A rule that failed may have left the shared node broken (a
			// connection out of step): later rules get a new one, so that
			// one bug does not fail them all.
			if rule.owned && tr.NewNode != nil {
				ownedShared = nil
			} else if shared = newNode(t); shared == nil {
				t.Fatal("newNode returned nil")
			}
		}
	}
}

// NodeRules returns the names of RunNode's rules, in the order it runs
// them: each is the name of a subtest of RunNode's test, and of a rule of
// docs/driver-contract.md.
func NodeRules() []string {
	names := make([]string, len(nodeRules))
	for i, r := range nodeRules {
		names[i] = r.name
	}
	return names
}

// serverAlive fails t when the server the suite owns (tr) has exited, so
// that a rule says the server crashed rather than fail on what followed.
// after says the rule has run.
func serverAlive(t *testing.T, tr *transport.Transport, after bool) {
	t.Helper()
	if tr == nil || tr.Crashed == nil {
		return
	}
	if err := tr.Crashed(); err != nil {
		if after {
			t.Errorf("the suite's server crashed during this rule (its other failures follow from that): %v", err)
			return
		}
		first, _, _ := strings.Cut(err.Error(), "\n")
		t.Fatalf("the suite's server crashed before this rule (its crash report is in the rule that was running): %s", first)
	}
}

type nodeRule struct {
	name  string
	run   func(t *testing.T, c *nodeCase)
	both  bool // the rule checks the fresh and the shared node itself
	owned bool // the rule needs the transport of conformance/harness
}

var nodeRules = []nodeRule{
	{name: "NoScript", run: testNoScript},
	{name: "EvalCachesScript", run: testEvalCachesScript},
	{name: "ScriptRunFallsBack", run: testScriptRunFallsBack},
	{name: "FallbackSource", run: testFallbackSource},
	{name: "ScriptErrors", run: testScriptErrors},
	{name: "IntegerReplies", run: testIntegerReplies},
	{name: "OtherReplyShapes", run: testOtherReplyShapes},
	{name: "BinaryKeys", run: testBinaryKeys},
	{name: "BinaryArgs", run: testBinaryArgs},
	{name: "ArgumentOrder", run: testArgumentOrder},
	{name: "SetNX", run: testSetNX},
	{name: "MillisecondTTL", run: testMillisecondTTL},
	{name: "Expiry", run: testExpiry},
	{name: "CanceledContext", run: testCanceledContext},
	{name: "Deadline", run: testDeadline, both: true},
	{name: "Cancel", run: testCancel, both: true},
	{name: "DeadlineThroughoutStall", run: testDeadlineThroughoutStall, both: true},
	{name: "LateReply", run: testLateReply, both: true},
	{name: "OwnContext", run: testOwnContext, both: true},
	{name: "OneWinner", run: testOneWinner},
	{name: "ConcurrentUse", run: testConcurrentUse},
	{name: "Stringer", run: testStringer},
	{name: "BatchOrder", run: testBatchOrder},
	{name: "BatchNoScript", run: testBatchNoScript},
	{name: "BatchContext", run: testBatchContext, both: true},
	{name: "PartReadBatch", run: testPartReadBatch},
	{name: "BatchRunsOnce", run: testBatchRunsOnce},
	{name: "RunWaitReplies", run: testRunWaitReplies},
	{name: "RunWaitNoScript", run: testRunWaitNoScript},
	{name: "RunWaitDeadline", run: testRunWaitDeadline},
	{name: "WatchDelivers", run: testWatchDelivers},
	{name: "NoRetry", run: testNoRetry, both: true, owned: true},
	{name: "DialDeadline", run: testDialDeadline, both: true, owned: true},
	{name: "PermanentErrors", run: testPermanentErrors, both: true, owned: true},
	// RunWait against a replica, Watch's connection, a shared client.
	{name: "RunWaitFrozenReplica", run: testRunWaitFrozenReplica, owned: true},
	{name: "RunWaitKeepsReplies", run: testRunWaitKeepsReplies},
	{name: "RunWaitAOF", run: testRunWaitAOF},
	{name: "WatchOwnChannel", run: testWatchOwnChannel},
	{name: "WatchResubscribes", run: testWatchResubscribes, owned: true},
	{name: "WatchDialDeadline", run: testWatchDialDeadline, both: true, owned: true},
	{name: "DeadlineBehindLongCall", run: testDeadlineBehindLongCall},
	{name: "TLS", run: testTLS, both: true, owned: true},
}

// A nodeCase is one node under test, with keys of its own.
type nodeCase struct {
	driver.Node
	keyspace
	run   string
	which string    // "fresh" or "shared"
	other *nodeCase // the other node, for the rules that check both
	tr    *transport.Transport
	// onTr says the nodes talk to tr's server (through its fault point):
	// only then may the rule stall or reconfigure the server through tr.
	onTr bool
	// stalled is when whileBlocked last began to stall the server: the
	// server answers nobody from some moment after it until busyFor after
	// that moment.
	stalled time.Time
	// newNode is the factory, for a node that blocks the server when the
	// suite does not own it.
	newNode func(t *testing.T) driver.Node
}

// on returns a case for node n, named which, with keys of its own.
func (c *nodeCase) on(n driver.Node, which string) *nodeCase {
	return &nodeCase{Node: n, keyspace: newKeyspace(c.run), run: c.run, which: which, tr: c.tr, onTr: c.onTr, newNode: c.newNode}
}

// both returns the fresh and the shared node's cases (c alone when c is
// the shared one).
func (c *nodeCase) both() []*nodeCase {
	if c.other == nil {
		return []*nodeCase{c}
	}
	return []*nodeCase{c, c.other}
}

// script returns source made unique to this run, so its SHA1 is new to the server.
func (c *nodeCase) script(body string) string {
	return "-- dlm conformance " + c.run + " " + c.prefix + "\n" + body
}

// call runs one call with Run and returns its outcome.
func (c *nodeCase) call(t *testing.T, cx context.Context, call driver.Call) ([]int64, error) {
	t.Helper()
	calls := []driver.Call{call}
	c.Run(cx, calls)
	settled(t, "Run", calls)
	return calls[0].Reply, calls[0].Err
}

// evalCtx runs src with EVAL.
func (c *nodeCase) evalCtx(t *testing.T, cx context.Context, src string, keys []string, args ...string) ([]int64, error) {
	t.Helper()
	return c.call(t, cx, driver.Call{Source: src, Keys: keys, Args: args})
}

// evalSHA runs the script with the given digest with EVALSHA.
func (c *nodeCase) evalSHA(t *testing.T, cx context.Context, sha1 string, keys []string, args ...string) ([]int64, error) {
	t.Helper()
	return c.call(t, cx, driver.Call{SHA1: sha1, Keys: keys, Args: args})
}

// eval runs src with EVAL and fails t on error.
func (c *nodeCase) eval(t *testing.T, src string, keys []string, args ...string) []int64 {
	t.Helper()
	r, err := c.evalCtx(t, ctx(t), src, keys, args...)
	if err != nil {
		t.Fatalf("Eval(%s): %v", quote(src), err)
	}
	return r
}

// settled fails t unless what set exactly one of Reply and Err on every
// call. It may be called from any goroutine.
func settled(t *testing.T, what string, calls []driver.Call) {
	t.Helper()
	for i, cl := range calls {
		if (cl.Reply == nil) == (cl.Err == nil) {
			t.Errorf("%s: call %d of %d has reply %v and error %v; a Node sets exactly one of Reply (non-nil, empty for an empty array) and Err",
				what, i+1, len(calls), cl.Reply, cl.Err)
		}
	}
}

func expect(t *testing.T, what string, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: reply %s, want %s", what, ints(got), ints(want))
	}
}

func testNoScript(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script("return {7}"))
	r, err := c.evalSHA(t, ctx(t), sc.SHA1(), []string{c.key("k")})
	if !errors.Is(err, driver.ErrNoScript) {
		t.Fatalf("EvalSHA of a script the server never saw: reply %v, error %v; want an error matching driver.ErrNoScript", r, err)
	}
}

func testEvalCachesScript(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script("return {7, -7}"))
	keys := []string{c.key("k")}
	expect(t, "Eval", c.eval(t, sc.Source(), keys), []int64{7, -7})
	r, err := c.evalSHA(t, ctx(t), sc.SHA1(), keys)
	if err != nil {
		t.Fatalf("EvalSHA after Eval of the same source: %v (a call with a Source must send EVAL with it; the server caches it)", err)
	}
	expect(t, "EvalSHA after Eval", r, []int64{7, -7})
}

func testScriptRunFallsBack(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script("return {tonumber(ARGV[1]) + 1}"))
	keys := []string{c.key("k")}
	for i := range 2 { // first through EVAL, then through EVALSHA
		r, err := sc.Run(ctx(t), c, keys, "41")
		if err != nil {
			t.Fatalf("Script.Run, call %d: %v", i+1, err)
		}
		expect(t, fmt.Sprintf("Script.Run, call %d", i+1), r, []int64{42})
	}
}

func testFallbackSource(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	expect(t, "Eval", c.eval(t, c.script("return {1}"), keys), []int64{1})
	lacking := eval.NewScript(c.script("return {2}"))
	r, err := c.evalSHA(t, ctx(t), lacking.SHA1(), keys)
	if !errors.Is(err, driver.ErrNoScript) {
		t.Errorf("EvalSHA of a script the server lacks, right after Eval of another: reply %s, error %v; want an error matching driver.ErrNoScript%s",
			ints(r), err, wrongSource(r, []int64{1}))
	}
	// A batch of two unknown scripts after Eval of a third.
	expect(t, "Eval", c.eval(t, c.script("return {3}"), keys), []int64{3})
	calls := []driver.Call{
		{SHA1: eval.NewScript(c.script("return {4}")).SHA1(), Keys: keys},
		{SHA1: eval.NewScript(c.script("return {5}")).SHA1(), Keys: keys},
	}
	c.Run(ctx(t), calls)
	settled(t, "Run", calls)
	for i, cl := range calls {
		if !errors.Is(cl.Err, driver.ErrNoScript) {
			t.Errorf("call %d of a batch of scripts the server lacks, right after Eval of another: reply %s, error %v; want an error matching driver.ErrNoScript%s",
				i+1, ints(cl.Reply), cl.Err, wrongSource(cl.Reply, []int64{3}))
		}
	}
	// New scripts in turn, each through its own EVALSHA-then-EVAL, then
	// again from the cache.
	scripts := make([]*eval.Script, 3)
	for i := range scripts {
		scripts[i] = eval.NewScript(c.script(fmt.Sprintf("return {%d}", 10+i)))
	}
	for round := range 2 {
		for i, sc := range scripts {
			r, err := sc.Run(ctx(t), c, keys)
			if err != nil || !slices.Equal(r, []int64{int64(10 + i)}) {
				t.Errorf("Script.Run of script %d of 3 run in turn (round %d): reply %s, error %v; want [%d]: each script must run its own source",
					i+1, round+1, ints(r), err, 10+i)
			}
		}
	}
}

// wrongSource explains a reply equal to that of the script sent before.
func wrongSource(got, before []int64) string {
	if slices.Equal(got, before) {
		return " (the reply is that of the script sent before: the driver's own NOSCRIPT fallback sent another script's source)"
	}
	return ""
}

func testScriptErrors(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	for _, src := range []string{
		"return redis.error_reply('CONFORMANCE error reply')",
		"return redis.call('CONFORMANCE-NO-SUCH-COMMAND')",
		"return {1} +", // does not compile
	} {
		src = c.script(src)
		r, err := c.evalCtx(t, ctx(t), src, keys)
		switch {
		case err == nil:
			t.Errorf("Eval(%s): reply %v and no error, want an error", quote(src), r)
		case errors.Is(err, driver.ErrNoScript):
			t.Errorf("Eval(%s): error %v matches driver.ErrNoScript; only NOSCRIPT may", quote(src), err)
		}
	}
	// The same through EVALSHA: once cached, an erroring script is not NOSCRIPT.
	sc := eval.NewScript(c.script("return redis.error_reply('CONFORMANCE error reply')"))
	_, _ = c.evalCtx(t, ctx(t), sc.Source(), keys)
	_, err := c.evalSHA(t, ctx(t), sc.SHA1(), keys)
	switch {
	case err == nil:
		t.Errorf("EvalSHA of a script replying with an error: no error")
	case errors.Is(err, driver.ErrNoScript):
		t.Errorf("EvalSHA of a cached script replying with an error: %v matches driver.ErrNoScript, so Script.Run would run it twice", err)
	}
}

// setNX sets KEYS[1] to ARGV[1] with a TTL of ARGV[2] ms only when it is
// absent, and replies {set, whether KEYS[1] now holds ARGV[1]}.
const setNX = `local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return {ok and 1 or 0, redis.call('GET', KEYS[1]) == ARGV[1] and 1 or 0}`

func testSetNX(t *testing.T, c *nodeCase) {
	src := c.script(setNX)
	k := []string{c.key("lock")}
	expect(t, "SET NX on an absent key", c.eval(t, src, k, "first", "60000"), []int64{1, 1})
	expect(t, "SET NX on a present key", c.eval(t, src, k, "second", "60000"), []int64{0, 0})
	expect(t, "SET NX with the holder's value", c.eval(t, src, k, "first", "60000"), []int64{0, 1})
}

func testMillisecondTTL(t *testing.T, c *nodeCase) {
	src := c.script(`redis.call('SET', KEYS[1], 'v', 'PX', ARGV[1]) return {redis.call('PTTL', KEYS[1])}`)
	for _, ttl := range []int64{1500, 250, 60001} {
		r := c.eval(t, src, []string{c.key("k")}, strconv.FormatInt(ttl, 10))
		if len(r) != 1 || r[0] > ttl || r[0] < ttl-200 {
			t.Errorf("SET PX %d then PTTL: reply %s, want one value in [%d, %d]", ttl, ints(r), ttl-200, ttl)
		}
	}
}

func testExpiry(t *testing.T, c *nodeCase) {
	k := []string{c.key("k")}
	expect(t, "SET PX 100 then EXISTS", c.eval(t, c.script(`redis.call('SET', KEYS[1], 'v', 'PX', 100) return {redis.call('EXISTS', KEYS[1])}`), k), []int64{1})
	exists := c.script(`return {redis.call('EXISTS', KEYS[1])}`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := c.eval(t, exists, k)
		if slices.Equal(r, []int64{0}) {
			return
		}
		if !slices.Equal(r, []int64{1}) {
			t.Fatalf("EXISTS: reply %s, want [0] or [1]", ints(r))
		}
		if time.Now().After(deadline) {
			t.Fatal("a key set with PX 100 still exists after 5s")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func testOneWinner(t *testing.T, c *nodeCase) {
	const n = 64
	src := c.script(setNX)
	k := []string{c.key("lock")}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		wins  []int
		errs  []error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			cx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			r, err := c.evalCtx(t, cx, src, k, "owner-"+strconv.Itoa(i), "60000")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case slices.Equal(r, []int64{1, 1}):
				wins = append(wins, i)
			case !slices.Equal(r, []int64{0, 0}):
				errs = append(errs, fmt.Errorf("goroutine %d: reply %s, want [1 1] or [0 0]", i, ints(r)))
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%d of %d calls failed: %v", len(errs), n, err)
	}
	if len(wins) != 1 {
		t.Fatalf("%d goroutines raced SET NX on one key and %d won (%v), want exactly 1", n, len(wins), wins)
	}
	expect(t, "the winner holds the key", c.eval(t, c.script(`return {redis.call('GET', KEYS[1]) == ARGV[1] and 1 or 0}`), k, "owner-"+strconv.Itoa(wins[0])), []int64{1})
}

func testConcurrentUse(t *testing.T, c *nodeCase) {
	const goroutines, calls = 32, 25
	sc := eval.NewScript(c.script(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return {tonumber(ARGV[1]), -tonumber(ARGV[1]), tonumber(redis.call('GET', KEYS[1]))}`))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				v := int64(g*1000 + i + 1)
				cx, cancel := context.WithTimeout(context.Background(), callTimeout)
				keys, arg := []string{c.key("g" + strconv.Itoa(g))}, strconv.FormatInt(v, 10)
				var r []int64
				var err error
				if i%2 == 0 {
					r, err = sc.Run(cx, c, keys, arg)
				} else {
					r, err = c.evalCtx(t, cx, sc.Source(), keys, arg)
				}
				cancel()
				if err == nil && !slices.Equal(r, []int64{v, -v, v}) {
					err = fmt.Errorf("call with %d got reply %s, want [%d %d %d]: replies mixed up between calls", v, ints(r), v, -v, v)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d goroutines failed: %v", len(errs), errors.Join(errs...))
	}
}

func testStringer(t *testing.T, c *nodeCase) {
	s, ok := c.Node.(fmt.Stringer)
	if !ok {
		t.Skipf("%T does not implement fmt.Stringer; errors will name it by its position", c.Node)
	}
	if s.String() == "" {
		t.Error("String() is empty; it should name the server or client")
	}
}
