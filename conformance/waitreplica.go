package conformance

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// Rules of Node.RunWait against a replica: the suite's own (conformance/
// harness), which it freezes, and WAITAOF where the server has it.

// frozenWait is the WAIT timeout RunWaitFrozenReplica uses: the server
// answers 0 once it passes.
const frozenWait = 100 * time.Millisecond

// infoScript replies the integer after ARGV[2] in INFO ARGV[1], or -1.
const infoScript = `local v = string.match(redis.call('INFO', ARGV[1]), ARGV[2] .. '(%d+)')
return {tonumber(v) or -1}`

// info returns the integer that follows prefix in section of the server's
// INFO (read by a script through c's node), or -1 when there is none.
func (c *nodeCase) info(t *testing.T, section, prefix string) int64 {
	t.Helper()
	r := c.eval(t, c.script(infoScript), []string{c.key("info")}, section, prefix)
	if len(r) != 1 {
		t.Fatalf("reading INFO %s: reply %s", section, ints(r))
	}
	return r[0]
}

// freezeReplica freezes the suite's replica until t ends or the returned
// function is called.
func freezeReplica(t *testing.T, c *nodeCase) (thaw func()) {
	t.Helper()
	if err := c.tr.FreezeReplica(true); err != nil {
		t.Fatalf("freezing the suite's replica: %v", err)
	}
	frozen := true
	thaw = func() {
		if frozen {
			frozen = false
			if err := c.tr.FreezeReplica(false); err != nil {
				t.Fatalf("resuming the suite's replica: %v", err)
			}
		}
	}
	t.Cleanup(thaw)
	return thaw
}

func testRunWaitFrozenReplica(t *testing.T, c *nodeCase) {
	if c.tr.FreezeReplica == nil {
		t.Skip("the suite's server has no replica of its own")
	}
	sc := eval.NewScript(c.script(incrScript))
	keys := []string{c.key("k")}
	calls, acks, err := c.runWait(t, ctx(t), driver.Wait{Replicas: 1, Timeout: callTimeout}, driver.Call{Source: sc.Source(), Keys: keys})
	skipUnsupported(t, "RunWait", err)
	if err != nil || acks.Replicas != 1 {
		t.Fatalf("on the %s node, RunWait of a write and WAIT 1 with the suite's one replica running: reply %s, acks %+v, error %v; want the replica's acknowledgement",
			c.which, ints(calls[0].Reply), acks, err)
	}
	freezeReplica(t, c)
	waitsBefore := c.info(t, "commandstats", "cmdstat_wait:calls=")
	w := driver.Wait{Replicas: 1, Timeout: frozenWait}
	runs := []struct {
		what string
		run  func() ([][]int64, driver.Acks, error)
	}{
		{"RunWait of one EVAL", func() ([][]int64, driver.Acks, error) {
			calls, acks, err := c.runWait(t, ctx(t), w, driver.Call{Source: sc.Source(), Keys: keys})
			return [][]int64{calls[0].Reply}, acks, err
		}},
		{"RunWait of two EVALSHA", func() ([][]int64, driver.Acks, error) {
			calls, acks, err := c.runWait(t, ctx(t), w, driver.Call{SHA1: sc.SHA1(), Keys: keys}, driver.Call{SHA1: sc.SHA1(), Keys: keys})
			return [][]int64{calls[0].Reply, calls[1].Reply}, acks, err
		}},
		{"Script.RunWait", func() ([][]int64, driver.Acks, error) {
			r, acks, err := sc.RunWait(ctx(t), c, w, keys)
			return [][]int64{r}, acks, err
		}},
	}
	count := int64(1)
	for _, r := range runs {
		start := time.Now()
		replies, acks, err := r.run()
		took := time.Since(start)
		what := fmt.Sprintf("on the %s node, with the suite's one replica frozen, %s and WAIT 1 %d", c.which, r.what, frozenWait.Milliseconds())
		if err != nil {
			t.Errorf("%s: error %v; want the replies and 0 replicas (WAIT answers 0 when its timeout passes)", what, err)
			continue
		}
		for i, reply := range replies {
			count++
			expect(t, fmt.Sprintf("%s, call %d", what, i+1), reply, []int64{count, 1})
		}
		if acks.Replicas != 0 || acks.Local {
			waits := c.info(t, "commandstats", "cmdstat_wait:calls=") - waitsBefore
			var why string
			switch {
			case waits <= 0:
				why = "the server ran no WAIT: the driver reported acknowledgements it never asked for"
			case took >= frozenWait:
				why = "WAIT ran out its timeout, so the server answered 0: report WAIT's reply, not the replicas asked for"
			default:
				why = "WAIT answered at once, on a connection whose writes the replica had acknowledged before it froze: WAIT must follow the calls on their own connection, or a fresh write counts as replicated"
			}
			t.Errorf("%s: acks %+v, want 0 replicas: the write reached no replica (%s)", what, acks, why)
			waitsBefore += waits
		}
	}
}

func testRunWaitKeepsReplies(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script(incrScript))
	keys := []string{c.key("k")}
	// WAITAOF with a local fsync fails on its own where the server has no
	// WAITAOF (before 7.2) or no append-only file.
	w := driver.Wait{AOF: true, Local: true, Timeout: time.Second}
	calls, acks, err := c.runWait(t, ctx(t), w, driver.Call{Source: sc.Source(), Keys: keys}, driver.Call{SHA1: sc.SHA1(), Keys: keys})
	skipUnsupported(t, "RunWait", err)
	if err == nil {
		t.Skipf("WAITAOF 1 0 succeeded (acks %+v): the server fsyncs an append-only file, so this rule has no wait that fails alone", acks)
	}
	if errors.Is(err, driver.ErrNoScript) || acks != (driver.Acks{}) {
		t.Errorf("RunWait whose WAITAOF failed after its calls succeeded: acks %+v, error %v; want the wait's error and zero Acks", acks, err)
	}
	for i, cl := range calls {
		if cl.Err != nil || cl.Reply == nil {
			t.Errorf("RunWait whose wait failed (%v): call %d has reply %s and error %v; want its own reply, kept when only the wait fails, so the caller can undo the call's work",
				err, i+1, ints(cl.Reply), cl.Err)
			continue
		}
		expect(t, fmt.Sprintf("RunWait whose wait failed, call %d", i+1), cl.Reply, []int64{int64(i + 1), 1})
	}
	expect(t, "Eval after a RunWait whose wait failed", c.eval(t, c.script("return {42}"), keys), []int64{42})
}

func testRunWaitAOF(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	v := c.eval(t, c.script("return {redis.REDIS_VERSION_NUM or 0}"), keys)
	if len(v) != 1 || v[0] < 0x070200 {
		// The harness starts a server that has WAITAOF (Valkey 8.0) when
		// one is installed, and the rule runs there, on a node of the
		// driver dialled to it.
		if c.tr == nil || c.tr.WaitAOFServer == nil || c.tr.Dial == nil {
			t.Skipf("WAITAOF needs Redis 7.2 or later; the server is %s (under conformance/harness the rule runs on a Valkey 8.0 the harness starts, when valkey-server is installed)", versionString(v))
		}
		addr, why := c.tr.WaitAOFServer(t)
		if addr == "" {
			t.Skipf("WAITAOF needs Redis 7.2 or later; the server is %s, and the harness started none that has it: %s", versionString(v), why)
		}
		n, err := c.tr.Dial(t, addr)
		if err != nil {
			t.Fatalf("dialling the server with WAITAOF the harness started (%s): %v", addr, err)
		}
		if n == nil {
			t.Fatal("the dial returned nil")
		}
		nc := c.on(n, c.which+" (dialled to a server with WAITAOF)")
		nc.onTr = false
		t.Logf("the server is %s, without WAITAOF: the rule runs on %s, which the harness started with its append-only file on", versionString(v), addr)
		awaitAOFRewrite(t, nc)
		waitAOF(t, nc, false)
		return
	}
	if c.info(t, "persistence", "aof_enabled:") != 1 {
		if !c.onTr {
			t.Skip("the server has appendonly off: WAITAOF cannot report a local fsync")
		}
		if _, err := transport.Do(c.tr.Addr, 5*time.Second, "CONFIG", "SET", "appendonly", "yes"); err != nil {
			t.Fatalf("turning the server's append-only file on: %v", err)
		}
		t.Cleanup(func() { _, _ = transport.Do(c.tr.Addr, 5*time.Second, "CONFIG", "SET", "appendonly", "no") })
		awaitAOFRewrite(t, c)
	}
	waitAOF(t, c, c.onTr && c.tr.FreezeReplica != nil)
}

// awaitAOFRewrite waits until the server of c's node has no append-only
// file rewrite in progress or scheduled (its first, once the file is on).
func awaitAOFRewrite(t *testing.T, c *nodeCase) {
	t.Helper()
	for deadline := time.Now().Add(callTimeout); c.info(t, "persistence", "aof_rewrite_in_progress:") != 0 ||
		c.info(t, "persistence", "aof_rewrite_scheduled:") != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server's first append-only file rewrite did not end within %v", callTimeout)
		}
	}
}

// waitAOF checks RunWait with WAITAOF 1 0 on c's node, whose server has
// WAITAOF and an append-only file, with the suite's replica frozen when
// freeze is set.
func waitAOF(t *testing.T, c *nodeCase, freeze bool) {
	t.Helper()
	keys := []string{c.key("k")}
	frozen := false
	if freeze {
		freezeReplica(t, c)
		frozen = true
	}
	calls, acks, err := c.runWait(t, ctx(t), driver.Wait{AOF: true, Local: true, Replicas: 0, Timeout: 2 * time.Second}, driver.Call{Source: c.script(incrScript), Keys: keys})
	skipUnsupported(t, "RunWait", err)
	what := "RunWait of a write and WAITAOF 1 0 on a server that fsyncs its append-only file"
	if frozen {
		what += ", with its one replica frozen"
	}
	switch {
	case err != nil:
		t.Fatalf("%s: %v", what, err)
	case !acks.Local, frozen && acks.Replicas != 0:
		t.Errorf("%s: acks %+v; want Local true%s (the reply is [numlocal, numreplicas], in that order)", what, acks, map[bool]string{true: " and 0 replicas"}[frozen])
	}
	expect(t, what, calls[0].Reply, []int64{1, 1})
}

// versionString formats REDIS_VERSION_NUM's reply.
func versionString(v []int64) string {
	if len(v) != 1 || v[0] <= 0 {
		return "older than 7.0 (no REDIS_VERSION_NUM)"
	}
	return strconv.FormatInt(v[0]>>16, 10) + "." + strconv.FormatInt(v[0]>>8&0xff, 10) + "." + strconv.FormatInt(v[0]&0xff, 10)
}
