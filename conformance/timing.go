package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/nodekit"
)

// Rules on contexts: an ended context, a deadline or a cancellation while
// the server does not answer.

func testCanceledContext(t *testing.T, c *nodeCase) {
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := c.evalCtx(t, cx, c.script("return {1}"), []string{c.key("k")})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Eval with a canceled context: reply %v, error %v; want an error matching context.Canceled", r, err)
	}
	cx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	r, err = c.evalSHA(t, cx, nodekit.NewScript(c.script("return {1}")).SHA1(), []string{c.key("k")})
	if !isDeadline(err) {
		t.Errorf("EvalSHA with an expired deadline: reply %v, error %v; want an error matching context.DeadlineExceeded", r, err)
	}
}

func testDeadline(t *testing.T, c *nodeCase) { blockedRun(t, c, byDeadline, 1) }

func testCancel(t *testing.T, c *nodeCase) { blockedRun(t, c, byCancel, 1) }

func isDeadline(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// An ending is how a context ends callLimit after a call began.
type ending struct {
	what  string // "a 100ms deadline"
	want  string // the error wanted, for messages
	ctx   func() (context.Context, context.CancelFunc)
	match func(error) bool
}

var (
	byDeadline = ending{
		what: fmt.Sprintf("a %v deadline", callLimit), want: "context.DeadlineExceeded",
		ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), callLimit)
		},
		match: isDeadline,
	}
	byCancel = ending{
		what: fmt.Sprintf("a cancellation after %v", callLimit), want: "context.Canceled",
		ctx: func() (context.Context, context.CancelFunc) {
			cx, cancel := context.WithCancel(context.Background())
			timer := time.AfterFunc(callLimit, cancel)
			return cx, func() { timer.Stop(); cancel() }
		},
		match: func(err error) bool { return errors.Is(err, context.Canceled) },
	}
)

// blockedRun runs a batch of n probe calls on a context that ends as e
// says, while the server is blocked: the batch must return within returnBy,
// every call failing with e's error.
func blockedRun(t *testing.T, c *nodeCase, e ending, n int) {
	t.Helper()
	whileBlocked(t, c, func(probe string, keys []string) bool {
		calls := make([]dlm.Call, n)
		for i := range calls {
			calls[i] = dlm.Call{Source: probe, Keys: keys}
		}
		cx, cancel := e.ctx()
		defer cancel()
		start := time.Now()
		c.Run(cx, calls)
		took := time.Since(start)
		settled(t, "Run", calls)
		answered := 0
		for _, cl := range calls {
			if cl.Err == nil {
				answered++
			}
		}
		what := fmt.Sprintf("while the server was blocked, a batch of %d calls with %s", n, e.what)
		switch {
		case answered == n && took < callLimit:
			return true // answered before the server was blocked
		case answered > 0:
			t.Errorf("%s returned %d replies after %v: the context is not enforced", what, answered, took.Round(time.Millisecond))
		case took > returnBy:
			t.Errorf("%s returned after %v (error %v): the context is not enforced on the connection", what, took.Round(time.Millisecond), calls[0].Err)
		default:
			for i, cl := range calls {
				if !e.match(cl.Err) {
					t.Errorf("%s: call %d failed with %v, want an error matching %s", what, i+1, cl.Err, e.want)
				}
			}
		}
		return false
	})
}

// busyScript blocks the server: it busy-waits on the server clock for
// ARGV[1] microseconds and replies {1}.
const busyScript = `local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local start = now()
while now() - start < tonumber(ARGV[1]) do end
return {1}`

// The server is blocked for busyFor; a call with a 100ms deadline must
// return well before the server answers again.
const (
	busyFor   = 1500 * time.Millisecond
	callLimit = 100 * time.Millisecond
	returnBy  = 900 * time.Millisecond // generous: a loaded machine is slow
)

// whileBlocked blocks the server that holds c's keys, calls f with a fresh
// probe script while it is blocked, and waits until the server answers
// again. f reports whether the call was answered by the server before it was
// blocked, in which case the probe is tried again.
func whileBlocked(t *testing.T, c *nodeCase, f func(probe string, keys []string) (early bool)) {
	t.Helper()
	busyKeys := []string{c.key("busy")}
	busy := c.script(busyScript)
	for attempt := 1; ; attempt++ {
		done := make(chan error, 1)
		go func() {
			cx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			_, err := c.evalCtx(t, cx, busy, busyKeys, strconv.FormatInt(busyFor.Microseconds(), 10))
			done <- err
		}()
		time.Sleep(150 * time.Millisecond) // let the busy script reach the server
		early := f(c.script(fmt.Sprintf("return {%d}", attempt)), []string{c.key("probe")})
		select {
		case err := <-done:
			if err != nil {
				t.Logf("the busy script failed: %v", err)
			}
		case <-time.After(callTimeout + time.Second):
			t.Fatal("the busy script did not return")
		}
		waitAnswering(t, c)
		if !early || t.Failed() {
			return
		}
		if attempt == 3 {
			t.Fatal("the server answered every probe before the busy script blocked it; the machine is too slow for this rule")
		}
	}
}

// waitAnswering waits until the server answers a trivial script again.
func waitAnswering(t *testing.T, c *nodeCase) {
	t.Helper()
	deadline := time.Now().Add(callTimeout)
	for {
		cx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.evalCtx(t, cx, c.script("return {1}"), []string{c.key("busy")})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not answer after the busy script: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
