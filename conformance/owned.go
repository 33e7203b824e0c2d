package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"
)

// Rules that need the suite to own the path to the server (package
// conformance/harness): faults on the wire, which no wrapper of a Node can
// inject beneath the driver.

// replyDelay is how long NoRetry holds a reply: longer than a client's own
// short read timeout, well within the call's context.
const replyDelay = 500 * time.Millisecond

func testNoRetry(t *testing.T, c *nodeCase) {
	incr := c.script("redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 60000) return {1}")
	faults := []struct {
		what     string
		set      func(on bool) error
		mustFail bool
		sizes    []int
	}{
		{"connection broke after the server ran the script (the reply was cut)", c.tr.CutReplies, true, []int{1, 2}},
		{fmt.Sprintf("reply was held %v (within its context)", replyDelay), func(on bool) error {
			if on {
				return c.tr.DelayReplies(replyDelay)
			}
			return c.tr.DelayReplies(0)
		}, false, []int{1}},
	}
	// Each fault meets calls that send the source (EVAL) and calls of the
	// cached script (EVALSHA): a driver that re-sends only the digest of a
	// script the server has runs it twice as surely.
	sha := eval.NewScript(incr).SHA1()
	for fi, f := range faults {
		for _, nc := range c.both() {
			for _, n := range f.sizes {
				for _, cached := range []bool{false, true} {
					calls := make([]driver.Call, n)
					for i := range calls {
						calls[i] = driver.Call{Source: incr, Keys: []string{c.key(fmt.Sprintf("%s-%d-%d-%d-%t", nc.which, fi, n, i, cached))}}
						if cached {
							calls[i].Source, calls[i].SHA1 = "", sha
						}
					}
					if cached {
						// The server caches the script (an EVAL before the fault).
						nc.eval(t, incr, []string{c.key("cache")})
					}
					warmUp(t, nc)
					if err := f.set(true); err != nil {
						t.Fatalf("the fault point: %v", err)
					}
					cx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					nc.Run(cx, calls)
					cancel()
					if err := f.set(false); err != nil {
						t.Fatalf("the fault point: %v", err)
					}
					settled(t, "Run", calls)
					for i, cl := range calls {
						what := fmt.Sprintf("on the %s node, call %d of %d (%s), whose %s,", nc.which, i+1, n, map[bool]string{false: "EVAL of the source", true: "EVALSHA of the cached script"}[cached], f.what)
						if f.mustFail && cl.Err == nil {
							t.Errorf("%s succeeded (reply %s): no reply could arrive, so the driver ran it again", what, ints(cl.Reply))
						}
						if runs := countRuns(t, nc, cl.Keys[0]); runs > 1 {
							t.Errorf("%s ran its script %d times (error %v): a Node never retries, its client's retries (go-redis MaxRetries, for one) included", what, runs, cl.Err)
						}
					}
				}
			}
		}
	}
}

// warmUp makes concurrent calls that each hold a connection for 20ms, so
// that a pooling client has connections at hand for a retry (a retry on a
// new connection would meet the fault in the connection's handshake, before
// the script is sent again).
func warmUp(t *testing.T, c *nodeCase) {
	t.Helper()
	busy := c.script(busyScript)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			cx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			calls := []driver.Call{{Source: busy, Keys: []string{c.key("warm")}, Args: []string{"20000"}}}
			c.Run(cx, calls)
			if calls[0].Err != nil {
				t.Errorf("on the %s node, a call before the fault: %v", c.which, calls[0].Err)
			}
		})
	}
	wg.Wait()
}

// countRuns reads the counter at key through c's node, retrying while the
// node reconnects.
func countRuns(t *testing.T, c *nodeCase, key string) int64 {
	t.Helper()
	r := evalAnswered(t, c, c.script("return {tonumber(redis.call('GET', KEYS[1]) or '0')}"), []string{key})
	if len(r) != 1 {
		t.Fatalf("on the %s node, reading a counter after the fault was healed: reply %s", c.which, ints(r))
	}
	return r[0]
}

// evalAnswered runs src through c's node once the fault was healed,
// retrying errors for up to callTimeout: a client with several connections
// (rueidis pipelines, picked at random for each call) may meet one the
// fault broke, and a Node that does not retry reports that once.
func evalAnswered(t *testing.T, c *nodeCase, src string, keys []string) []int64 {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		cx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := c.evalCtx(t, cx, src, keys)
		cancel()
		if err == nil {
			return r
		}
		if time.Now().After(deadline) {
			serverAlive(t, c.tr, false)
			t.Fatalf("on the %s node, after the fault was healed: Eval(%s): %v", c.which, quote(src), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dialProbing is how long DialDeadline calls each node while connects
// hang: long enough to use up connections a pool still holds, which fail
// at once since the fault point closed them.
const dialProbing = 500 * time.Millisecond

// hang makes new connects to the suite's server hang (and closes the
// connections through the fault point) until the returned heal is called;
// heal may be called more than once.
func hang(t *testing.T, c *nodeCase) (heal func()) {
	t.Helper()
	if err := c.tr.Hang(true); err != nil {
		t.Fatalf("making connects to the server hang: %v", err)
	}
	hanging := true
	return func() {
		if hanging {
			hanging = false
			if err := c.tr.Hang(false); err != nil {
				t.Fatalf("making the server reachable again: %v", err)
			}
		}
	}
}

func testDialDeadline(t *testing.T, c *nodeCase) {
	heal := hang(t, c)
	defer heal()
	probe := c.script("return {1}")
	for _, nc := range c.both() {
		end := time.Now().Add(dialProbing)
		for i := 1; time.Now().Before(end); i++ {
			// The call runs on a goroutine of its own, which a dial that
			// ignores the context keeps until connects are answered again.
			done := make(chan driver.Call, 1)
			start := time.Now()
			go func() {
				calls := []driver.Call{{Source: probe, Keys: []string{c.key("probe")}}}
				cx, cancel := context.WithTimeout(context.Background(), callLimit)
				defer cancel()
				nc.Run(cx, calls)
				done <- calls[0]
			}()
			what := fmt.Sprintf("on the %s node, call %d with %s, made while TCP connects to the server hang", nc.which, i, byDeadline.what)
			select {
			case cl := <-done:
				settled(t, "Run", []driver.Call{cl})
				if cl.Err == nil {
					t.Fatalf("%s got reply %s: every connection to the server was closed", what, ints(cl.Reply))
				}
				if took := time.Since(start); took > returnBy {
					t.Fatalf("%s returned after %v (error %v): the dial does not honour the context", what, took.Round(time.Millisecond), cl.Err)
				}
			case <-time.After(returnBy):
				t.Fatalf("%s had not returned after %v: the dial does not honour the context (dial with net.Dialer.DialContext and the call's context, or a connect timeout no longer than it)", what, returnBy)
			}
		}
	}
	heal()
	for _, nc := range c.both() {
		waitAnswering(t, nc)
		r := evalAnswered(t, nc, probe, []string{c.key("probe")})
		if !slices.Equal(r, []int64{1}) {
			t.Errorf("on the %s node, once the server was reachable again: reply %s, want [1]", nc.which, ints(r))
		}
	}
}
