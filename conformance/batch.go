package conformance

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Rules on batches: Run of several calls.

// largeBatch is the size of the large batch BatchOrder sends.
const largeBatch = 1000

func testBatchOrder(t *testing.T, c *nodeCase) {
	sc := nodekit.NewScript(c.script(`local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return {tonumber(ARGV[1]), -tonumber(ARGV[1]), n, 9007199254740992}`))
	// Load the script, so every call of the batch runs.
	c.eval(t, sc.Source(), []string{c.key("load")}, "0")
	keys := []string{c.key("a"), c.key("b"), c.key("c")}
	for _, size := range []int{1, 3, largeBatch} {
		calls := make([]dlm.Call, size)
		for i := range calls {
			calls[i] = dlm.Call{SHA1: sc.SHA1(), Keys: []string{keys[i%len(keys)] + strconv.Itoa(size)}, Args: []string{strconv.Itoa(i*7 + 1)}}
			if i%4 == 3 { // EVAL and EVALSHA mixed, as Script.RunMany sends them
				calls[i].SHA1, calls[i].Source = "", sc.Source()
			}
		}
		c.Run(ctx(t), calls)
		settled(t, "Run", calls)
		counts := map[string]int64{}
		for i, cl := range calls {
			k := cl.Keys[0]
			counts[k]++
			v := int64(i*7 + 1)
			want := []int64{v, -v, counts[k], 1 << 53}
			if cl.Err != nil || !slices.Equal(cl.Reply, want) {
				t.Fatalf("Run of %d calls, call %d: reply %s, error %v; want %s (replies must come back exact and in the order of the calls)",
					size, i+1, ints(cl.Reply), cl.Err, ints(want))
			}
		}
	}
	c.Run(ctx(t), nil)
	c.Run(ctx(t), []dlm.Call{})
}

func testBatchNoScript(t *testing.T, c *nodeCase) {
	unknown := nodekit.NewScript(c.script("return {tonumber(ARGV[1]) + 1}"))
	batch := func(sha1 string) []dlm.Call {
		calls := make([]dlm.Call, 5)
		for i := range calls {
			calls[i] = dlm.Call{SHA1: sha1, Keys: []string{c.key("k")}, Args: []string{strconv.Itoa(i)}}
		}
		return calls
	}
	calls := batch(unknown.SHA1())
	c.Run(ctx(t), calls)
	settled(t, "Run", calls)
	for i, cl := range calls {
		if !errors.Is(cl.Err, dlm.ErrNoScript) {
			t.Errorf("call %d of a script the server lacks: reply %v, error %v; want an error matching dlm.ErrNoScript", i+1, cl.Reply, cl.Err)
		}
	}
	// An erroring script fails its own call only, and not as NOSCRIPT.
	failing := nodekit.NewScript(c.script("if ARGV[1] == '2' then return redis.error_reply('CONFORMANCE error') end return {tonumber(ARGV[1])}"))
	c.eval(t, failing.Source(), []string{c.key("k")}, "0")
	calls = batch(failing.SHA1())
	c.Run(ctx(t), calls)
	settled(t, "Run", calls)
	for i, cl := range calls {
		switch {
		case i == 2 && (cl.Err == nil || errors.Is(cl.Err, dlm.ErrNoScript)):
			t.Errorf("the call whose script replied with an error: reply %v, error %v; want an error that is not NOSCRIPT", cl.Reply, cl.Err)
		case i != 2 && (cl.Err != nil || !slices.Equal(cl.Reply, []int64{int64(i)})):
			t.Errorf("call %d next to a failing call: reply %s, error %v; want [%d]", i+1, ints(cl.Reply), cl.Err, i)
		}
	}
	// Script.RunMany loads the script once and runs every call.
	calls = batch("")
	unknown.RunMany(ctx(t), c.Node, calls)
	for i, cl := range calls {
		if cl.Err != nil || !slices.Equal(cl.Reply, []int64{int64(i + 1)}) {
			t.Errorf("Script.RunMany call %d: reply %s, error %v; want [%d]", i+1, ints(cl.Reply), cl.Err, i+1)
		}
	}
}

func testBatchContext(t *testing.T, c *nodeCase) {
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := make([]dlm.Call, 3)
	for i := range calls {
		calls[i] = dlm.Call{Source: c.script("return {1}"), Keys: []string{c.key("k")}}
	}
	c.Run(cx, calls)
	settled(t, "Run", calls)
	for i, cl := range calls {
		if !errors.Is(cl.Err, context.Canceled) {
			t.Errorf("call %d of a batch with a canceled context: reply %v, error %v; want an error matching context.Canceled", i+1, cl.Reply, cl.Err)
		}
	}
	blockedRun(t, c, byDeadline, 2)
}
