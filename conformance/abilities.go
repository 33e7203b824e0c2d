package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
)

// Rules for the optional abilities of a Node. Each is skipped, with the
// reason, when the Node does not implement the ability (found with
// dlm.NodeAs, so wrappers that Unwrap are looked through).

var abilityRules = []nodeRule{
	{"PipelinerOrder", testPipelinerOrder},
	{"PipelinerNoScript", testPipelinerNoScript},
	{"PipelinerContext", testPipelinerContext},
	{"NotifierDelivers", testNotifierDelivers},
	{"ReplicaWaiterReplies", testReplicaWaiterReplies},
	{"ReplicaWaiterNoScript", testReplicaWaiterNoScript},
	{"ReplicaWaiterDeadline", testReplicaWaiterDeadline},
}

func ability[T any](t *testing.T, c *nodeCase, name string) T {
	t.Helper()
	a, ok := dlm.NodeAs[T](c.Node)
	if !ok {
		t.Skipf("%T does not implement %s", c.Node, name)
	}
	return a
}

// pipelineBatch is the size of the large batch PipelinerOrder sends.
const pipelineBatch = 1000

func testPipelinerOrder(t *testing.T, c *nodeCase) {
	p := ability[dlm.Pipeliner](t, c, "dlm.Pipeliner")
	sc := dlm.NewScript(c.script(`local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return {tonumber(ARGV[1]), -tonumber(ARGV[1]), n, 9007199254740992}`))
	// Load the script, so every call of the batch runs.
	if _, err := c.Eval(ctx(t), sc.Source(), []string{c.key("load")}, "0"); err != nil {
		t.Fatalf("Eval: %v", err)
	}
	for _, size := range []int{1, 3, pipelineBatch} {
		calls := make([]dlm.ScriptCall, size)
		keys := []string{c.key("a"), c.key("b"), c.key("c")}
		for i := range calls {
			calls[i] = dlm.ScriptCall{Keys: []string{keys[i%len(keys)] + strconv.Itoa(size)}, Args: []string{strconv.Itoa(i*7 + 1)}}
		}
		res, err := p.EvalSHAMany(ctx(t), sc.SHA1(), calls)
		if err != nil {
			t.Fatalf("EvalSHAMany of %d calls: %v", size, err)
		}
		if len(res) != size {
			t.Fatalf("EvalSHAMany of %d calls returned %d results", size, len(res))
		}
		counts := map[string]int64{}
		for i, r := range res {
			k := calls[i].Keys[0]
			counts[k]++
			v := int64(i*7 + 1)
			want := []int64{v, -v, counts[k], 1 << 53}
			if r.Err != nil || !slices.Equal(r.Reply, want) {
				t.Fatalf("EvalSHAMany of %d calls, result %d: reply %s, error %v; want %s (results must come back exact and in the order of the calls)",
					size, i, ints(r.Reply), r.Err, ints(want))
			}
		}
	}
	res, err := p.EvalSHAMany(ctx(t), sc.SHA1(), nil)
	if err != nil || len(res) != 0 {
		t.Errorf("EvalSHAMany of no calls: %d results, error %v; want none and no error", len(res), err)
	}
}

func testPipelinerNoScript(t *testing.T, c *nodeCase) {
	p := ability[dlm.Pipeliner](t, c, "dlm.Pipeliner")
	known := dlm.NewScript(c.script("return {tonumber(ARGV[1])}"))
	if _, err := c.Eval(ctx(t), known.Source(), []string{c.key("k")}, "0"); err != nil {
		t.Fatalf("Eval: %v", err)
	}
	unknown := dlm.NewScript(c.script("return {tonumber(ARGV[1]) + 1}"))
	calls := make([]dlm.ScriptCall, 5)
	for i := range calls {
		calls[i] = dlm.ScriptCall{Keys: []string{c.key("k")}, Args: []string{strconv.Itoa(i)}}
	}
	res, err := p.EvalSHAMany(ctx(t), unknown.SHA1(), calls)
	if err != nil {
		t.Fatalf("EvalSHAMany of a script the server lacks: %v; want one NOSCRIPT result per call, not a batch error", err)
	}
	if len(res) != len(calls) {
		t.Fatalf("EvalSHAMany of %d calls returned %d results", len(calls), len(res))
	}
	for i, r := range res {
		if !errors.Is(r.Err, dlm.ErrNoScript) {
			t.Errorf("result %d of a script the server lacks: reply %v, error %v; want an error matching dlm.ErrNoScript", i, r.Reply, r.Err)
		}
	}
	// An erroring script fails its own call only, and not as NOSCRIPT.
	failing := dlm.NewScript(c.script("if ARGV[1] == '2' then return redis.error_reply('CONFORMANCE error') end return {tonumber(ARGV[1])}"))
	if _, err := c.Eval(ctx(t), failing.Source(), []string{c.key("k")}, "0"); err != nil {
		t.Fatalf("Eval: %v", err)
	}
	res, err = p.EvalSHAMany(ctx(t), failing.SHA1(), calls)
	if err != nil || len(res) != len(calls) {
		t.Fatalf("EvalSHAMany with one failing call: %d results, error %v", len(res), err)
	}
	for i, r := range res {
		switch {
		case i == 2 && (r.Err == nil || errors.Is(r.Err, dlm.ErrNoScript)):
			t.Errorf("the call whose script replied with an error: reply %v, error %v; want an error that is not NOSCRIPT", r.Reply, r.Err)
		case i != 2 && (r.Err != nil || !slices.Equal(r.Reply, []int64{int64(i)})):
			t.Errorf("result %d next to a failing call: reply %s, error %v; want [%d]", i, ints(r.Reply), r.Err, i)
		}
	}
	// Script.RunMany loads the script once and runs every call.
	out, err := unknown.RunMany(ctx(t), c.Node, calls)
	if err != nil {
		t.Fatalf("Script.RunMany: %v", err)
	}
	for i, r := range out {
		if r.Err != nil || !slices.Equal(r.Reply, []int64{int64(i + 1)}) {
			t.Errorf("Script.RunMany result %d: reply %s, error %v; want [%d]", i, ints(r.Reply), r.Err, i+1)
		}
	}
}

func testPipelinerContext(t *testing.T, c *nodeCase) {
	p := ability[dlm.Pipeliner](t, c, "dlm.Pipeliner")
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := p.EvalSHAMany(cx, dlm.NewScript(c.script("return {1}")).SHA1(), []dlm.ScriptCall{{Keys: []string{c.key("k")}}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("EvalSHAMany with a canceled context: results %v, error %v; want an error matching context.Canceled", res, err)
	}
	whileBlocked(t, c, func(probe string, keys []string) bool {
		sc := dlm.NewScript(probe)
		cx, cancel := context.WithTimeout(context.Background(), callLimit)
		defer cancel()
		start := time.Now()
		res, err := p.EvalSHAMany(cx, sc.SHA1(), []dlm.ScriptCall{{Keys: keys}, {Keys: keys}})
		took := time.Since(start)
		switch {
		case err == nil && took < callLimit:
			return true
		case err == nil:
			t.Errorf("while the server was blocked, EvalSHAMany with a %v deadline returned results %v after %v", callLimit, res, took.Round(time.Millisecond))
		case took > returnBy:
			t.Errorf("while the server was blocked, EvalSHAMany with a %v deadline returned after %v (error %v)", callLimit, took.Round(time.Millisecond), err)
		case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("EvalSHAMany that ran out of time returned %v, want an error matching context.DeadlineExceeded", err)
		}
		return false
	})
}

func testNotifierDelivers(t *testing.T, c *nodeCase) {
	nt := ability[dlm.Notifier](t, c, "dlm.Notifier")
	channel := c.key("channel")
	got := make(chan string, 64)
	stop, err := nt.Watch(ctx(t), channel, func(p string) {
		select {
		case got <- p:
		default:
		}
	})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	publish := c.script("return {redis.call('PUBLISH', KEYS[1], ARGV[1])}")
	for i, payload := range []string{"first", "second \x00\r\n"} {
		c.eval(t, publish, []string{channel}, payload)
		select {
		case p := <-got:
			if p != payload {
				t.Fatalf("message %d: notify got %q, want %q", i+1, p, payload)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a message published after Watch returned was not delivered within 5s (Watch must return once the server confirmed the subscription)")
		}
	}
	c.eval(t, publish, []string{c.key("other-channel")}, "elsewhere")
	stop()
	stopped = true
	stop() // a second call does nothing
	c.eval(t, publish, []string{channel}, "after stop")
	select {
	case p := <-got:
		t.Fatalf("notify got %q after stop returned, want no more calls (or a message of another channel)", p)
	case <-time.After(300 * time.Millisecond):
	}
	// Watch with an ended context fails.
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	if stop, err := nt.Watch(cx, c.key("canceled"), func(string) {}); err == nil {
		stop()
		t.Errorf("Watch with a canceled context succeeded, want an error")
	}
}

// incrScript writes, so WAIT after it has a write to count.
const incrScript = "return {redis.call('INCR', KEYS[1]), redis.call('PEXPIRE', KEYS[1], 60000)}"

func testReplicaWaiterReplies(t *testing.T, c *nodeCase) {
	rw := ability[dlm.ReplicaWaiter](t, c, "dlm.ReplicaWaiter")
	src := c.script(incrScript)
	keys := []string{c.key("k")}
	w := dlm.Wait{Replicas: 0, Timeout: callTimeout}
	for i, call := range []func() ([]int64, dlm.Acks, error){
		func() ([]int64, dlm.Acks, error) { return rw.EvalWait(ctx(t), w, src, keys) },
		func() ([]int64, dlm.Acks, error) { return rw.EvalSHAWait(ctx(t), w, dlm.NewScript(src).SHA1(), keys) },
		func() ([]int64, dlm.Acks, error) { return dlm.NewScript(src).RunWait(ctx(t), rw, w, keys) },
	} {
		start := time.Now()
		r, acks, err := call()
		took := time.Since(start)
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
	if _, _, err := rw.EvalWait(ctx(t), dlm.Wait{Replicas: 1}, src, keys); !errors.Is(err, dlm.ErrInvalid) {
		t.Errorf("EvalWait with a zero Wait.Timeout: %v, want an error matching dlm.ErrInvalid (WAIT 0 blocks forever)", err)
	}
	// A failing script is an error with zero Acks, not NOSCRIPT.
	r, acks, err := rw.EvalWait(ctx(t), w, c.script("return redis.error_reply('CONFORMANCE error')"), keys)
	if err == nil || errors.Is(err, dlm.ErrNoScript) || acks != (dlm.Acks{}) {
		t.Errorf("EvalWait of a script replying with an error: reply %v, acks %+v, error %v; want an error (not NOSCRIPT) and zero Acks", r, acks, err)
	}
	// The connection is in step afterwards.
	expect(t, "Eval after EvalWait", c.eval(t, c.script("return {42}"), keys), []int64{42})
}

func testReplicaWaiterNoScript(t *testing.T, c *nodeCase) {
	rw := ability[dlm.ReplicaWaiter](t, c, "dlm.ReplicaWaiter")
	sc := dlm.NewScript(c.script(incrScript))
	r, acks, err := rw.EvalSHAWait(ctx(t), dlm.Wait{Timeout: time.Second}, sc.SHA1(), []string{c.key("k")})
	if !errors.Is(err, dlm.ErrNoScript) || acks != (dlm.Acks{}) {
		t.Fatalf("EvalSHAWait of a script the server never saw: reply %v, acks %+v, error %v; want an error matching dlm.ErrNoScript and zero Acks", r, acks, err)
	}
	expect(t, "GET after a NOSCRIPT EvalSHAWait", c.eval(t, c.script("return {redis.call('EXISTS', KEYS[1])}"), []string{c.key("k")}), []int64{0})
}

func testReplicaWaiterDeadline(t *testing.T, c *nodeCase) {
	rw := ability[dlm.ReplicaWaiter](t, c, "dlm.ReplicaWaiter")
	src := c.script(incrScript)
	keys := []string{c.key("k")}
	cx, cancel := context.WithTimeout(context.Background(), callLimit)
	defer cancel()
	start := time.Now()
	r, acks, err := rw.EvalWait(cx, dlm.Wait{Replicas: 1, Timeout: callTimeout}, src, keys)
	took := time.Since(start)
	switch {
	case err == nil && acks.Replicas >= 1:
		t.Skipf("the server has a replica (WAIT 1 answered %+v at once); this rule needs one without", acks)
	case err == nil:
		t.Errorf("EvalWait with WAIT 1 for %v on a server without replicas and a %v deadline: reply %v, acks %+v after %v; want an error near the deadline",
			callTimeout, callLimit, r, acks, took.Round(time.Millisecond))
	case took > returnBy:
		t.Errorf("EvalWait blocked in WAIT with a %v deadline returned after %v (error %v): the context must bound the wait", callLimit, took.Round(time.Millisecond), err)
	case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded):
		t.Errorf("EvalWait that ran out of time returned %v, want an error matching context.DeadlineExceeded", err)
	}
	// The node still answers (a connection left waiting for WAIT's reply
	// must not be reused).
	waitAnswering(t, c)
	expect(t, "Eval after the abandoned WAIT", c.eval(t, c.script("return {7}"), keys), []int64{7})
}
