package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm"
)

// Rules of Node.RunWait, skipped when the first RunWait of a rule reports
// errors.ErrUnsupported.

// skipUnsupported skips t when err says the node cannot do what method asks.
func skipUnsupported(t *testing.T, method string, err error) {
	t.Helper()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s reports errors.ErrUnsupported: %v", method, err)
	}
}

// incrScript writes, so WAIT after it has a write to count.
const incrScript = "return {redis.call('INCR', KEYS[1]), redis.call('PEXPIRE', KEYS[1], 60000)}"

// runWait runs calls and w with RunWait.
func (c *nodeCase) runWait(t *testing.T, cx context.Context, w driver.Wait, calls ...driver.Call) ([]driver.Call, driver.Acks, error) {
	t.Helper()
	acks, err := c.RunWait(cx, calls, w)
	if !errors.Is(err, errors.ErrUnsupported) {
		settled(t, "RunWait", calls)
	}
	return calls, acks, err
}

func testRunWaitReplies(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script(incrScript))
	keys := []string{c.key("k")}
	w := driver.Wait{Replicas: 0, Timeout: callTimeout}
	one := func(call driver.Call) func() ([]int64, driver.Acks, error) {
		return func() ([]int64, driver.Acks, error) {
			calls, acks, err := c.runWait(t, ctx(t), w, call)
			return calls[0].Reply, acks, err
		}
	}
	for i, call := range []func() ([]int64, driver.Acks, error){
		one(driver.Call{Source: sc.Source(), Keys: keys}),
		one(driver.Call{SHA1: sc.SHA1(), Keys: keys}),
		func() ([]int64, driver.Acks, error) { return sc.RunWait(ctx(t), c, w, keys) },
	} {
		start := time.Now()
		r, acks, err := call()
		took := time.Since(start)
		if i == 0 {
			skipUnsupported(t, "RunWait", err)
		}
		if err != nil {
			t.Fatalf("call %d (WAIT 0): %v", i+1, err)
		}
		expect(t, fmt.Sprintf("call %d (WAIT 0)", i+1), r, []int64{int64(i + 1), 1})
		if acks.Replicas < 0 || acks.Local {
			t.Errorf("call %d (WAIT 0): acks %+v, want a replica count of at least 0 and no local fsync", i+1, acks)
		}
		if took > returnBy {
			t.Errorf("call %d: WAIT for 0 replicas took %v; it answers at once", i+1, took.Round(time.Millisecond))
		}
	}
	// Several calls, then the wait: every reply in order.
	calls, _, err := c.runWait(t, ctx(t), w,
		driver.Call{Source: sc.Source(), Keys: keys}, driver.Call{SHA1: sc.SHA1(), Keys: keys}, driver.Call{SHA1: sc.SHA1(), Keys: keys})
	if err != nil {
		t.Fatalf("RunWait of 3 calls (WAIT 0): %v", err)
	}
	for i, cl := range calls {
		expect(t, fmt.Sprintf("RunWait of 3 calls, call %d", i+1), cl.Reply, []int64{int64(i + 4), 1})
	}
	// A failing script is an error with zero Acks, not NOSCRIPT, and fails
	// its own call only.
	calls, acks, err := c.runWait(t, ctx(t), w,
		driver.Call{Source: sc.Source(), Keys: keys}, driver.Call{Source: c.script("return redis.error_reply('CONFORMANCE error')"), Keys: keys})
	if err == nil || errors.Is(err, driver.ErrNoScript) || acks != (driver.Acks{}) || calls[1].Err == nil {
		t.Errorf("RunWait of a script replying with an error: call error %v, acks %+v, error %v; want an error (not NOSCRIPT) and zero Acks", calls[1].Err, acks, err)
	}
	expect(t, "RunWait, the call before a failing one", calls[0].Reply, []int64{7, 1})
	if _, err := c.RunWait(ctx(t), []driver.Call{{Source: sc.Source(), Keys: keys}}, driver.Wait{Replicas: 1}); !errors.Is(err, dlm.ErrInvalid) {
		t.Errorf("RunWait with a zero Wait.Timeout: %v, want an error matching dlm.ErrInvalid (WAIT 0 blocks forever)", err)
	}
	// The connection is in step afterwards.
	expect(t, "Eval after RunWait", c.eval(t, c.script("return {42}"), keys), []int64{42})
}

func testRunWaitNoScript(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script(incrScript))
	calls, acks, err := c.runWait(t, ctx(t), driver.Wait{Timeout: time.Second}, driver.Call{SHA1: sc.SHA1(), Keys: []string{c.key("k")}})
	skipUnsupported(t, "RunWait", err)
	if !errors.Is(err, driver.ErrNoScript) || !errors.Is(calls[0].Err, driver.ErrNoScript) || acks != (driver.Acks{}) {
		t.Fatalf("RunWait of a script the server never saw: call error %v, acks %+v, error %v; want errors matching driver.ErrNoScript and zero Acks", calls[0].Err, acks, err)
	}
	expect(t, "EXISTS after a NOSCRIPT RunWait", c.eval(t, c.script("return {redis.call('EXISTS', KEYS[1])}"), []string{c.key("k")}), []int64{0})
}

func testRunWaitDeadline(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	// One replica more than the server has: WAIT blocks for its timeout.
	replicas := int(max(c.info(t, "replication", "connected_slaves:"), 0)) + 1
	cx, cancel := context.WithTimeout(context.Background(), callLimit)
	defer cancel()
	start := time.Now()
	calls, acks, err := c.runWait(t, cx, driver.Wait{Replicas: replicas, Timeout: callTimeout}, driver.Call{Source: c.script(incrScript), Keys: keys})
	took := time.Since(start)
	skipUnsupported(t, "RunWait", err)
	switch {
	case err == nil:
		t.Errorf("RunWait with WAIT %d for %v on a server with %d replicas and a %v deadline: reply %v, acks %+v after %v; want an error near the deadline",
			replicas, callTimeout, replicas-1, callLimit, calls[0].Reply, acks, took.Round(time.Millisecond))
	case took > returnBy:
		t.Errorf("RunWait blocked in WAIT with a %v deadline returned after %v (error %v): the context must bound the wait", callLimit, took.Round(time.Millisecond), err)
	case !isDeadline(err):
		t.Errorf("RunWait that ran out of time returned %v, want an error matching context.DeadlineExceeded", err)
	}
	if r := calls[0].Reply; r != nil {
		expect(t, "the script's reply, kept when only the wait failed", r, []int64{1, 1})
	}
	// The node still answers (a connection left waiting for WAIT's reply
	// must not be reused).
	waitAnswering(t, c)
	expect(t, "Eval after the abandoned WAIT", evalAnswered(t, c, c.script("return {7}"), keys), []int64{7})
}
