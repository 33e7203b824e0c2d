package conformance

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// The rule on calls that share a client with another caller's long call.

// longCall is how long DeadlineBehindLongCall's long call keeps the server
// busy.
const longCall = time.Second

// longScript sets KEYS[2] and then busy-waits ARGV[1] microseconds.
const longScript = "redis.call('SET', KEYS[2], '1', 'PX', 60000)\n" + busyScript

// behindScript takes KEYS[1] for ARGV[1] as SET NX does and replies
// {whether KEYS[2] was set (the long call ran first), whether it took it}.
const behindScript = `local after = redis.call('EXISTS', KEYS[2])
local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 60000)
return {after, ok and 1 or 0}`

// testDeadlineBehindLongCall runs a long script on the node and, while it
// runs, an acquisition with a callLimit deadline on the same node: the
// acquisition must fail by its deadline, not be granted once the long call
// is done. A client that sends every call on one shared connection, and
// does not bound the wait for it by the call's context, grants it late.
func testDeadlineBehindLongCall(t *testing.T, c *nodeCase) {
	for attempt := 1; ; attempt++ {
		lock, marker := c.key(fmt.Sprintf("lock-%d", attempt)), c.key(fmt.Sprintf("long-%d", attempt))
		longDone := make(chan driver.Call, 1)
		go func() {
			cx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			calls := []driver.Call{{Source: c.script(longScript), Keys: []string{c.key("busy"), marker},
				Args: []string{strconv.FormatInt(longCall.Microseconds(), 10)}}}
			c.Run(cx, calls)
			longDone <- calls[0]
		}()
		time.Sleep(stallLead) // let the long call reach the server
		calls := []driver.Call{{Source: c.script(behindScript), Keys: []string{lock, marker}, Args: []string{"behind"}}}
		cx, cancel := byDeadline.ctx()
		c.Run(cx, calls)
		ended := contextEnded(cx)
		cancel()
		var long driver.Call
		longReturned := false
		select {
		case long = <-longDone:
			longReturned = true
		default:
		}
		settled(t, "Run", calls)
		cl := calls[0]
		what := fmt.Sprintf("on the %s node, an acquisition with %s made while another caller's %v call on the same node ran", c.which, byDeadline.what, longCall)
		early := cl.Err == nil && len(cl.Reply) == 2 && cl.Reply[0] == 0
		switch {
		case early:
			// The server ran it before the long call.
		case cl.Err == nil:
			t.Errorf("%s got reply %s (ran after the long call, granted: %v): it waited behind the long call past its deadline (bound the wait for a connection by the call's context)",
				what, ints(cl.Reply), len(cl.Reply) == 2 && cl.Reply[1] == 1)
		case longReturned:
			t.Errorf("%s returned only after the long call did (error %v): the wait for a connection must end with the call's context", what, cl.Err)
		case ended && !isDeadline(cl.Err):
			t.Errorf("%s failed with %v, want an error matching context.DeadlineExceeded", what, cl.Err)
		}
		if !longReturned {
			select {
			case long = <-longDone:
			case <-time.After(callTimeout + time.Second):
				t.Fatal("the long call did not return")
			}
		}
		if long.Err != nil {
			t.Logf("the long call failed: %v", long.Err)
		}
		waitAnswering(t, c)
		if !early || t.Failed() {
			return
		}
		if attempt == 3 {
			t.Fatal("the server ran every acquisition before the long call; the machine is too slow for this rule")
		}
	}
}
