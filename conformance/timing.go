package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm/conformance/internal/transport"
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
	r, err = c.evalSHA(t, cx, eval.NewScript(c.script("return {1}")).SHA1(), []string{c.key("k")})
	if !isDeadline(err) {
		t.Errorf("EvalSHA with an expired deadline: reply %v, error %v; want an error matching context.DeadlineExceeded", r, err)
	}
}

func testDeadline(t *testing.T, c *nodeCase) { blockedRun(t, c, byDeadline, 1) }

func testCancel(t *testing.T, c *nodeCase) { blockedRun(t, c, byCancel, 1) }

// contextEnded reports whether cx ended or its deadline passed (a socket
// deadline set from it may fire before its timer).
func contextEnded(cx context.Context) bool {
	dl, ok := cx.Deadline()
	return cx.Err() != nil || ok && !time.Now().Before(dl)
}

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

// blockedRun runs, on the fresh and then the shared node, a batch of n
// probe calls on a context that ends as e says, while the server is
// blocked: each batch must return within returnBy, every call failing with
// e's error.
func blockedRun(t *testing.T, c *nodeCase, e ending, n int) {
	t.Helper()
	whileBlocked(t, c, func(probe string, keys []string) bool {
		for _, nc := range c.both() {
			if early := probeBlocked(t, nc, e, n, probe, keys); early {
				return true
			}
		}
		return false
	})
}

// probeBlocked runs one batch of blockedRun on c's node and reports whether
// the server answered it before it was blocked.
func probeBlocked(t *testing.T, c *nodeCase, e ending, n int, probe string, keys []string) (early bool) {
	t.Helper()
	calls := make([]driver.Call, n)
	for i := range calls {
		calls[i] = driver.Call{Source: probe, Keys: keys}
	}
	cx, cancel := e.ctx()
	defer cancel()
	start := time.Now()
	c.Run(cx, calls)
	took := time.Since(start)
	ended := contextEnded(cx)
	settled(t, "Run", calls)
	answered := 0
	for _, cl := range calls {
		if cl.Err == nil {
			answered++
		}
	}
	what := fmt.Sprintf("on the %s node, while the server was blocked, a batch of %d calls with %s", c.which, n, e.what)
	switch {
	case answered == n && took < returnBy:
		// Answered before the server was blocked: a server blocked for
		// busyFor answers no probe sooner than busyFor-stallLead, past
		// returnBy (a loaded machine may hand the replies over after the
		// context ended; whileBlocked tells by the server's stamps).
		return true
	case answered > 0:
		t.Errorf("%s returned %d replies after %v: the context is not enforced", what, answered, took.Round(time.Millisecond))
	case took > returnBy:
		t.Errorf("%s returned after %v (error %v): the context is not enforced on the connection", what, took.Round(time.Millisecond), calls[0].Err)
	case !ended:
		// It failed before its context ended, with the error that stopped
		// it (a connection an earlier call broke, say).
		t.Logf("%s failed after %v, before its context ended: %v", what, took.Round(time.Millisecond), calls[0].Err)
	default:
		for i, cl := range calls {
			if !e.match(cl.Err) {
				t.Errorf("%s: call %d failed with %v, want an error matching %s", what, i+1, cl.Err, e.want)
			}
		}
	}
	return false
}

// testDeadlineThroughoutStall makes calls with a callLimit deadline one
// after another, on both nodes in turn, from the start of a stall to near
// its end: each must return by its deadline, whatever the node was doing
// when it started (a health check waiting on the stalled server, say). A
// call counts as kept past its deadline when it took over returnBy and
// came back only once the stall was over: one that a loaded machine
// returns late, but while the server could not answer, was not held by it.
func testDeadlineThroughoutStall(t *testing.T, c *nodeCase) {
	whileBlocked(t, c, func(probe string, keys []string) bool {
		stalled := c.stalled // the stall began after this
		window := stalled.Add(busyFor - 300*time.Millisecond)
		for i := 0; time.Now().Before(window); i++ {
			nc := c.both()[i%2]
			calls := []driver.Call{{Source: probe, Keys: keys}}
			cx, cancel := byDeadline.ctx()
			start := time.Now()
			at := start.Sub(stalled)
			nc.Run(cx, calls)
			took := time.Since(start)
			ended := contextEnded(cx)
			cancel()
			settled(t, "Run", calls)
			what := fmt.Sprintf("on the %s node, a call with %s made about %v into a %v stall of the server", nc.which, byDeadline.what, at.Round(10*time.Millisecond), busyFor)
			switch {
			case calls[0].Err == nil && i == 0 && took < returnBy:
				return true // answered before the server was blocked (see probeBlocked)
			case calls[0].Err == nil:
				t.Errorf("%s got a reply after %v: the server was stalled", what, took.Round(time.Millisecond))
			case took > returnBy && !time.Now().Before(stalled.Add(busyFor)):
				// Late, and back only once the server could answer again:
				// a call held on the server, not a loaded machine's delay.
				t.Errorf("%s returned after %v (error %v): something in the driver (a pool's lock held by a health check waiting on the server?) kept it past its deadline", what, took.Round(time.Millisecond), calls[0].Err)
			case ended && !isDeadline(calls[0].Err):
				t.Errorf("%s failed with %v, want an error matching context.DeadlineExceeded", what, calls[0].Err)
			}
			if t.Failed() {
				return false
			}
		}
		return false
	})
}

// testOwnContext sends, on each node while the server is blocked, a call
// with a callLimit deadline and, while it waits, a call whose deadline
// falls after the stall: the second gets its reply once the server
// answers, or fails with an error that does not say its own context ended.
// (rueidis closes a connection when a call sent on it alone outlives its
// deadline, and fails the calls queued behind it with that call's error.)
func testOwnContext(t *testing.T, c *nodeCase) {
	whileBlocked(t, c, func(probe string, keys []string) bool {
		var wg sync.WaitGroup
		var early atomic.Bool
		for _, nc := range c.both() {
			wg.Go(func() {
				short, cancelShort := byDeadline.ctx()
				defer cancelShort()
				first := make(chan driver.Call, 1)
				go func() {
					calls := []driver.Call{{Source: probe, Keys: keys}}
					nc.Run(short, calls)
					first <- calls[0]
				}()
				time.Sleep(callLimit / 4) // the short call is in flight
				long, cancelLong := context.WithTimeout(context.Background(), busyFor+callTimeout)
				defer cancelLong()
				calls := []driver.Call{{Source: probe, Keys: keys}}
				nc.Run(long, calls)
				ended := contextEnded(long)
				if (<-first).Err == nil {
					early.Store(true) // answered before the server was blocked
					return
				}
				settled(t, "Run", calls)
				if err := calls[0].Err; err != nil && !ended && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
					t.Errorf("on the %s node, while the server was blocked, a call sent while another with %s was waiting failed with %v before its own context ended: the other call's error, not its own", nc.which, byDeadline.what, err)
				}
			})
		}
		wg.Wait()
		return early.Load()
	})
}

// testLateReply ends calls at their deadline or by cancellation while the
// server stalls, on both nodes; whileBlocked then checks that each node's
// next call gets its own reply, and the rule checks calls one after another,
// concurrent and batched.
func testLateReply(t *testing.T, c *nodeCase) {
	whileBlocked(t, c, func(probe string, keys []string) bool {
		for _, nc := range c.both() {
			for _, e := range []ending{byDeadline, byCancel} {
				for _, n := range []int{1, 2} {
					if early := probeBlocked(t, nc, e, n, probe, keys); early {
						return true
					}
				}
			}
		}
		return false
	})
	if t.Failed() {
		return
	}
	for _, nc := range c.both() {
		ownReplies(t, nc)
	}
}

// ownReplies checks that calls one after another, concurrent and batched
// each get their own reply.
func ownReplies(t *testing.T, c *nodeCase) {
	t.Helper()
	echo := c.script("return {tonumber(ARGV[1])}")
	keys := []string{c.key("echo")}
	check := func(what string, cl driver.Call) {
		want := []int64{mustInt(cl.Args[0])}
		if cl.Err != nil || !slices.Equal(cl.Reply, want) {
			t.Errorf("on the %s node, after calls that ended at their deadline or were cancelled while the server stalled, %s: reply %s, error %v; want %s%s",
				c.which, what, ints(cl.Reply), cl.Err, ints(want), lateHint(cl.Err))
		}
	}
	for i := range 5 {
		calls := []driver.Call{{Source: echo, Keys: keys, Args: []string{strconv.FormatInt(nextEcho(), 10)}}}
		c.Run(ctx(t), calls)
		check(fmt.Sprintf("call %d of 5 made one after another", i+1), calls[0])
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			calls := []driver.Call{{Source: echo, Keys: keys, Args: []string{strconv.FormatInt(nextEcho(), 10)}}}
			cx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			c.Run(cx, calls)
			check(fmt.Sprintf("call %d of 16 made concurrently", i+1), calls[0])
		})
	}
	wg.Wait()
	calls := make([]driver.Call, 3)
	for i := range calls {
		calls[i] = driver.Call{Source: echo, Keys: keys, Args: []string{strconv.FormatInt(nextEcho(), 10)}}
	}
	c.Run(ctx(t), calls)
	for i, cl := range calls {
		check(fmt.Sprintf("call %d of a batch of 3", i+1), cl)
	}
}

var echoSeq atomic.Int64

// nextEcho returns a value no other call of the process echoes.
func nextEcho() int64 { return 1_000_000 + echoSeq.Add(1) }

func mustInt(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

func lateHint(err error) string {
	if err != nil {
		return ""
	}
	return ": another call's reply (a connection whose reply was left unread when a call ended must be closed, not reused)"
}

// busyScript blocks the server: it busy-waits for ARGV[1] microseconds
// (on a clock that moves while a script runs: transport.BusyClock) and
// replies {1}.
const busyScript = transport.BusyScript

// The server is blocked for busyFor; a call with a 100ms deadline must
// return well before the server answers again.
const (
	busyFor   = 1500 * time.Millisecond
	callLimit = 100 * time.Millisecond
	returnBy  = 900 * time.Millisecond // generous: a loaded machine is slow
	stallLead = 150 * time.Millisecond // from the stall's start to the first probe
)

// whileBlocked blocks the server that holds c's keys for busyFor, calls f
// with a fresh probe script while it is blocked, waits until the server
// answers again and checks that both nodes answer their next calls with
// their own replies. f reports whether a call was answered by the server
// before it was blocked, in which case the probe is tried again. The
// server is blocked through the transport when the suite owns it and the
// rule's nodes talk to it (harness.Run; not the caller's nodes under
// harness.Own), or else through a node of its own (newNode's), so that the
// probed nodes' connections stay free for the probes.
func whileBlocked(t *testing.T, c *nodeCase, f func(probe string, keys []string) (early bool)) {
	t.Helper()
	var blocker driver.Node
	viaTr := c.onTr && c.tr.Stall != nil
	if !viaTr {
		if blocker = c.newNode(t); blocker == nil {
			t.Fatal("newNode returned nil")
		}
	}
	for attempt := 1; ; attempt++ {
		busyKey, probeKey := c.key(fmt.Sprintf("busy-%d", attempt)), c.key(fmt.Sprintf("probe-%d", attempt))
		done := c.stall(blocker, busyKey)
		time.Sleep(stallLead) // let the busy script reach the server
		early := f(c.script(fmt.Sprintf(stampedProbe, -attempt)), []string{probeKey})
		var busyErr error
		select {
		case busyErr = <-done:
			if busyErr != nil {
				serverAlive(t, c.tr, false)
				t.Logf("the busy script failed: %v", busyErr)
			}
		case <-time.After(callTimeout + time.Second):
			t.Fatal("the busy script did not return")
		}
		for _, nc := range c.both() {
			waitAnswering(t, nc)
		}
		if !viaTr && busyErr == nil {
			c.checkBlockedBoth(t, busyKey)
		}
		if !early || t.Failed() {
			return
		}
		if !viaTr {
			c.explainEarly(t, attempt, busyKey, probeKey, busyErr)
		}
		if attempt == 3 {
			t.Fatal("the server answered every probe before the busy script blocked it, or after the stall ended; the machine is too slow for this rule")
		}
	}
}

// stall blocks the server for busyFor, through the transport when blocker
// is nil or else by running the busy script (stamping busyKey) through
// blocker, and returns where the stall's error arrives once it ended.
func (c *nodeCase) stall(blocker driver.Node, busyKey string) <-chan error {
	done := make(chan error, 1)
	c.stalled = time.Now()
	go func() {
		if blocker == nil {
			done <- c.tr.Stall(busyFor)
			return
		}
		cx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		calls := []driver.Call{{Source: c.script(stampedBusyScript), Keys: []string{busyKey}, Args: []string{strconv.FormatInt(busyFor.Microseconds(), 10)}}}
		blocker.Run(cx, calls)
		done <- calls[0].Err
	}()
	return done
}

// checkBlockedBoth fails t unless each node's server ran the busy script
// that blocked it. A node of another server may have its probes answered
// late on a loaded machine, failing them by their deadline as if its
// server had been blocked: the stamp of the busy script tells, whatever
// the timing.
func (c *nodeCase) checkBlockedBoth(t *testing.T, busyKey string) {
	t.Helper()
	stamp := c.script(`return {tonumber(redis.call('GET', KEYS[1]) or '-1')}`)
	for _, nc := range c.both() {
		if r := nc.eval(t, stamp, []string{busyKey}); len(r) == 1 && r[0] < 0 {
			t.Fatalf("the %s node's server never ran the script that blocked the server (through a node newNode returned), so the rule's probes of that node were not made while its server was blocked: the nodes newNode returns must talk to one server for a given key, or the rule cannot block the server they use", nc.which)
		}
	}
}

// explainEarly logs why a probe was answered outside the stall. A loaded
// machine may delay the busy script past the probes, or the probes past
// the stall; it says so only when that is what happened: the probes'
// server ran the busy script and the probes (both stamp the server's time
// on keys of one hash slot), not one without the other (nodes of two
// servers), which fails t.
func (c *nodeCase) explainEarly(t *testing.T, attempt int, busyKey, probeKey string, busyErr error) {
	t.Helper()
	stamps := c.script(`return {tonumber(redis.call('GET', KEYS[1]) or '-1'), tonumber(redis.call('GET', KEYS[2]) or '-1')}`)
	var busyAt, probeAt int64 = -1, -1
	for _, nc := range c.both() {
		r := nc.eval(t, stamps, []string{busyKey, probeKey})
		if len(r) != 2 {
			t.Fatalf("reading the busy script's and the probes' time stamps: reply %s", ints(r))
		}
		switch {
		case r[0] < 0 && busyErr != nil:
			t.Fatalf("the script that blocks the server failed (%v), so the probes were answered: the rule cannot stall the server through a node newNode returns", busyErr)
		case r[0] < 0 && r[1] >= 0:
			t.Fatalf("the %s node's server ran the probes but never ran the script that blocked the server (through a node newNode returned): the nodes newNode returns must talk to one server for a given key, or the rule cannot block the server they use", nc.which)
		case r[0] >= 0 && r[1] >= 0 && probeAt < 0:
			busyAt, probeAt = r[0], r[1]
		}
	}
	switch {
	case probeAt < 0:
		t.Logf("attempt %d: no server ran the probes that were answered: trying again", attempt)
	case probeAt >= busyAt:
		t.Logf("attempt %d: the server first ran a probe %v after the busy script began, once it had ended: the rule's probes outlasted the stall (the machine is loaded); trying again", attempt, time.Duration(probeAt-busyAt)*time.Microsecond)
	default:
		t.Logf("attempt %d: the server ran the probes %v before the busy script (the machine is loaded); trying again", attempt, time.Duration(busyAt-probeAt)*time.Microsecond)
	}
}

// stampedBusyScript is busyScript that first stamps the server's time (in
// microseconds) on KEYS[1], and stampedProbe (a format: the reply's one
// integer) a probe that stamps on KEYS[1] the time the server first ran
// it: whileBlocked tells by them whether probes answered early ran before
// the server was blocked, or on another server.
const (
	stampedBusyScript = transport.BusyClock + `local t0 = redis.call('TIME')
redis.call('SET', KEYS[1], t0[1] .. string.format('%06d', tonumber(t0[2])), 'PX', 60000)
local start = now()
while now() - start < tonumber(ARGV[1]) do end
return {1}`
	stampedProbe = `local t = redis.call('TIME')
if not redis.call('GET', KEYS[1]) then
  redis.call('SET', KEYS[1], t[1] .. string.format('%%06d', tonumber(t[2])), 'PX', 60000)
end
return {%d}`
)

// stallEndTimeout bounds waitAnswering's wait for a stalled server to
// answer again. On Valkey a stall is measured in the server's CPU time
// (transport.BusyClock), which a loaded machine stretches: a 3.4s stall
// outlasted a 10s wait at a load of 7 on 2 cores.
const stallEndTimeout = time.Minute

// waitAnswering waits until c's node answers a trivial script again, and
// fails t when the reply is not the call's own.
func waitAnswering(t *testing.T, c *nodeCase) {
	t.Helper()
	if c == nil {
		return
	}
	echo := c.script("return {tonumber(ARGV[1])}")
	deadline := time.Now().Add(stallEndTimeout)
	for {
		cx, cancel := context.WithTimeout(context.Background(), time.Second)
		v := nextEcho()
		r, err := c.evalCtx(t, cx, echo, []string{c.key("busy")}, strconv.FormatInt(v, 10))
		cancel()
		if err == nil && !slices.Equal(r, []int64{v}) {
			t.Fatalf("on the %s node, the first call after the server stalled replied %s, want [%d]: it got the reply of a call that ended at its context before (a connection whose reply was left unread when a call ended must be closed, not reused)",
				c.which, ints(r), v)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			serverAlive(t, c.tr, false)
			t.Fatalf("the %s node does not answer after the server stalled: %v", c.which, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
