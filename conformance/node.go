package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
)

// RunNode checks that the Nodes newNode returns keep every rule of the
// dlm.Node contract, each in a subtest named after the rule:
//
//   - NoScript: EvalSHA of a script the server lacks fails with an error
//     matching dlm.ErrNoScript.
//   - EvalCachesScript: after Eval, EvalSHA of the same source runs it.
//   - ScriptRunFallsBack: dlm.Script.Run runs a new script (EVALSHA, then EVAL).
//   - ScriptErrors: error replies and failing scripts are errors that do
//     not match dlm.ErrNoScript (so Script.Run does not run them twice).
//   - IntegerReplies: arrays of integers come back exact, negative values
//     and ±2^53 included, in order, of any length, empty too.
//   - OtherReplyShapes: any other reply (string, integer, nil, status,
//     nested or mixed array) is an error, never a guess.
//   - BinaryKeys, BinaryArgs: keys and arguments reach the server byte for
//     byte (NUL, CR LF, invalid UTF-8, empty, long).
//   - ArgumentOrder: keys and arguments keep their number and order.
//   - SetNX: SET NX PX in a script sets only an absent key.
//   - MillisecondTTL: TTLs in milliseconds reach the server unchanged.
//   - Expiry: a key set with PX expires on the server.
//   - CanceledContext: a call with an ended context fails with its error.
//   - Deadline: while the server is blocked, a call returns near its
//     context's deadline with an error matching context.DeadlineExceeded
//     (or os.ErrDeadlineExceeded).
//   - Cancel: while the server is blocked, cancelling the context makes
//     the call return promptly with context.Canceled.
//   - OneWinner: of 64 goroutines racing SET NX on one key, exactly one wins.
//   - ConcurrentUse: concurrent calls each get their own reply.
//   - Stringer: a node that implements fmt.Stringer names itself (skipped
//     otherwise).
//
// Nodes that implement optional abilities (found with dlm.NodeAs) keep their
// rules too; each is skipped, saying so, for a Node without the ability:
//
//   - PipelinerOrder: dlm.Pipeliner's EvalSHAMany returns one result per
//     call, exact and in the order of the calls, for 1, 3 and 1000 calls,
//     and none for no calls.
//   - PipelinerNoScript: a script the server lacks fails each call with
//     dlm.ErrNoScript, not the batch; a call whose script errors fails alone,
//     not as NOSCRIPT; dlm.Script.RunMany loads the script and runs them all.
//   - PipelinerContext: an ended context fails the batch; while the server
//     is blocked, the batch returns near its context's deadline.
//   - NotifierDelivers: messages published after dlm.Notifier's Watch
//     returned reach notify, byte for byte; none after stop returned; a
//     second stop does nothing; Watch with an ended context fails.
//   - ReplicaWaiterReplies: dlm.ReplicaWaiter's EvalWait, EvalSHAWait and
//     Script.RunWait return the script's exact reply, and WAIT for 0
//     replicas answers at once; a zero Wait.Timeout is refused with
//     dlm.ErrInvalid; a failing script is an error with zero Acks.
//   - ReplicaWaiterNoScript: EvalSHAWait of an unknown script fails with
//     dlm.ErrNoScript and zero Acks.
//   - ReplicaWaiterDeadline: on a server without replicas, WAIT for 1
//     replica with a long timeout returns near the context's deadline with
//     context.DeadlineExceeded, and the node answers afterwards (skipped when
//     the server has a replica).
//
// newNode is called once per subtest; it may return Nodes over one shared
// client and server, and may use t (t.Cleanup, t.Fatal). See the package
// documentation about the server being blocked.
func RunNode(t *testing.T, newNode func(t *testing.T) dlm.Node) {
	t.Helper()
	run := runID()
	for _, rule := range slices.Concat(nodeRules, abilityRules) {
		subtest(t, rule.name, func(t *testing.T) {
			n := newNode(t)
			if n == nil {
				t.Fatal("newNode returned nil")
			}
			rule.run(t, &nodeCase{Node: n, keyspace: newKeyspace(run), run: run})
		})
	}
}

type nodeCase struct {
	dlm.Node
	keyspace
	run string
}

// script returns source made unique to this run, so its SHA1 is new to the server.
func (c *nodeCase) script(body string) string {
	return "-- dlm conformance " + c.run + " " + c.prefix + "\n" + body
}

// eval runs src with Eval and fails t on error.
func (c *nodeCase) eval(t *testing.T, src string, keys []string, args ...string) []int64 {
	t.Helper()
	r, err := c.Eval(ctx(t), src, keys, args...)
	if err != nil {
		t.Fatalf("Eval(%s): %v", quote(src), err)
	}
	return r
}

func expect(t *testing.T, what string, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: reply %s, want %s", what, ints(got), ints(want))
	}
}

type nodeRule struct {
	name string
	run  func(t *testing.T, c *nodeCase)
}

var nodeRules = []nodeRule{
	{"NoScript", testNoScript},
	{"EvalCachesScript", testEvalCachesScript},
	{"ScriptRunFallsBack", testScriptRunFallsBack},
	{"ScriptErrors", testScriptErrors},
	{"IntegerReplies", testIntegerReplies},
	{"OtherReplyShapes", testOtherReplyShapes},
	{"BinaryKeys", testBinaryKeys},
	{"BinaryArgs", testBinaryArgs},
	{"ArgumentOrder", testArgumentOrder},
	{"SetNX", testSetNX},
	{"MillisecondTTL", testMillisecondTTL},
	{"Expiry", testExpiry},
	{"CanceledContext", testCanceledContext},
	{"Deadline", testDeadline},
	{"Cancel", testCancel},
	{"OneWinner", testOneWinner},
	{"ConcurrentUse", testConcurrentUse},
	{"Stringer", testStringer},
}

func testNoScript(t *testing.T, c *nodeCase) {
	sc := dlm.NewScript(c.script("return {7}"))
	r, err := c.EvalSHA(ctx(t), sc.SHA1(), []string{c.key("k")})
	if !errors.Is(err, dlm.ErrNoScript) {
		t.Fatalf("EvalSHA of a script the server never saw: reply %v, error %v; want an error matching dlm.ErrNoScript", r, err)
	}
}

func testEvalCachesScript(t *testing.T, c *nodeCase) {
	sc := dlm.NewScript(c.script("return {7, -7}"))
	keys := []string{c.key("k")}
	expect(t, "Eval", c.eval(t, sc.Source(), keys), []int64{7, -7})
	r, err := c.EvalSHA(ctx(t), sc.SHA1(), keys)
	if err != nil {
		t.Fatalf("EvalSHA after Eval of the same source: %v (Eval must send EVAL with the source; the server caches it)", err)
	}
	expect(t, "EvalSHA after Eval", r, []int64{7, -7})
}

func testScriptRunFallsBack(t *testing.T, c *nodeCase) {
	sc := dlm.NewScript(c.script("return {tonumber(ARGV[1]) + 1}"))
	keys := []string{c.key("k")}
	for i := range 2 { // first through EVAL, then through EVALSHA
		r, err := sc.Run(ctx(t), c, keys, "41")
		if err != nil {
			t.Fatalf("Script.Run, call %d: %v", i+1, err)
		}
		expect(t, fmt.Sprintf("Script.Run, call %d", i+1), r, []int64{42})
	}
}

func testScriptErrors(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	for _, src := range []string{
		"return redis.error_reply('CONFORMANCE error reply')",
		"return redis.call('CONFORMANCE-NO-SUCH-COMMAND')",
		"return {1} +", // does not compile
	} {
		src = c.script(src)
		r, err := c.Eval(ctx(t), src, keys)
		switch {
		case err == nil:
			t.Errorf("Eval(%s): reply %v and no error, want an error", quote(src), r)
		case errors.Is(err, dlm.ErrNoScript):
			t.Errorf("Eval(%s): error %v matches dlm.ErrNoScript; only NOSCRIPT may", quote(src), err)
		}
	}
	// The same through EVALSHA: once cached, an erroring script is not NOSCRIPT.
	sc := dlm.NewScript(c.script("return redis.error_reply('CONFORMANCE error reply')"))
	_, _ = c.Eval(ctx(t), sc.Source(), keys)
	_, err := c.EvalSHA(ctx(t), sc.SHA1(), keys)
	switch {
	case err == nil:
		t.Errorf("EvalSHA of a script replying with an error: no error")
	case errors.Is(err, dlm.ErrNoScript):
		t.Errorf("EvalSHA of a cached script replying with an error: %v matches dlm.ErrNoScript, so Script.Run would run it twice", err)
	}
}

func testIntegerReplies(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	expect(t, "mixed values", c.eval(t, c.script(
		"return {0, 1, -1, -2, 2147483648, -2147483649, 4294967296, 9007199254740992, -9007199254740992}"), keys),
		[]int64{0, 1, -1, -2, 2147483648, -2147483649, 4294967296, 1 << 53, -1 << 53})
	expect(t, "one value", c.eval(t, c.script("return {-42}"), keys), []int64{-42})
	expect(t, "from redis.call", c.eval(t, c.script(
		"redis.call('SET', KEYS[1], '10', 'PX', 60000) return {redis.call('INCRBY', KEYS[1], -15), redis.call('PTTL', KEYS[1]) > 0 and 1 or 0}"), keys),
		[]int64{-5, 1})
	if r := c.eval(t, c.script("return {}"), keys); len(r) != 0 {
		t.Errorf("empty array: reply %s, want no values", ints(r))
	}
	var want []int64
	for i := range 300 {
		want = append(want, int64(i-150)*1000003)
	}
	expect(t, "300 values", c.eval(t, c.script("local t = {} for i = 1, 300 do t[i] = (i - 151) * 1000003 end return t"), keys), want)
}

func testOtherReplyShapes(t *testing.T, c *nodeCase) {
	keys := []string{c.key("k")}
	for _, tc := range []struct{ what, src string }{
		{"bulk string", "return 'x'"},
		{"numeric string", "return '1'"},
		{"integer", "return 1"},
		{"nil", "return nil"},
		{"boolean", "return true"},
		{"status", "return redis.status_reply('OK')"},
		{"array with a string", "return {1, 'x'}"},
		{"array with a numeric string", "return {1, '2'}"},
		{"array with nil", "return {1, false}"},
		{"nested array", "return {1, {2}}"},
	} {
		r, err := c.Eval(ctx(t), c.script(tc.src), keys)
		if err == nil {
			t.Errorf("%s reply (%s): got %s and no error, want an error", tc.what, tc.src, ints(r))
		}
	}
}

// bytesScript replies, for every key and then every argument, its length
// followed by its bytes.
const bytesScript = `local out = {}
local function add(s)
  out[#out + 1] = #s
  for i = 1, #s do out[#out + 1] = string.byte(s, i) end
end
for _, k in ipairs(KEYS) do add(k) end
for _, a in ipairs(ARGV) do add(a) end
return out`

func bytesOf(ss ...string) []int64 {
	var out []int64
	for _, s := range ss {
		out = append(out, int64(len(s)))
		for i := range len(s) {
			out = append(out, int64(s[i]))
		}
	}
	return out
}

var binaryStrings = []string{"\x00", "a\x00b", "\r\n", "*1\r\n$4\r\nPING\r\n", "\xff\xfe\x80", "é ü 鍵", " \t", "{}"}

func testBinaryKeys(t *testing.T, c *nodeCase) {
	src := c.script(bytesScript)
	for _, s := range binaryStrings {
		k := c.key(s)
		expect(t, "key "+quote(k), c.eval(t, src, []string{k}), bytesOf(k))
	}
	// A value stored under a binary key is found under the same key.
	k := c.key("\x00\r\n\xff")
	r := c.eval(t, c.script(`redis.call('SET', KEYS[1], 'v', 'PX', 60000)
return {redis.call('EXISTS', KEYS[1]), redis.call('EXISTS', KEYS[2])}`), []string{k, c.key("\x00\r\n")})
	expect(t, "SET then EXISTS under a binary key", r, []int64{1, 0})
}

func testBinaryArgs(t *testing.T, c *nodeCase) {
	src := c.script(bytesScript)
	for _, s := range append(binaryStrings, "", string(make([]byte, 3000))) {
		expect(t, "argument "+quote(s), c.eval(t, src, nil, s), bytesOf(s))
	}
	// A token stored and compared, as lock scripts do.
	token := "tok\x00\r\n\xff"
	r := c.eval(t, c.script(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return {redis.call('GET', KEYS[1]) == ARGV[1] and 1 or 0, redis.call('GET', KEYS[1]) == ARGV[2] and 1 or 0}`),
		[]string{c.key("token")}, token, token[:len(token)-1])
	expect(t, "stored token compared with itself and with a prefix of itself", r, []int64{1, 0})
}

func testArgumentOrder(t *testing.T, c *nodeCase) {
	src := c.script(bytesScript)
	keys := []string{c.key("a"), c.key("bb"), c.key("ccc")}
	for _, args := range [][]string{nil, {}, {"1"}, {"1", "", "3"}, {"", ""}, {"x", "yy", "zzz", "", "5"}} {
		want := bytesOf(append(slices.Clone(keys), args...)...)
		expect(t, fmt.Sprintf("3 keys, args %q", args), c.eval(t, src, keys, args...), want)
	}
	expect(t, "no keys, no args", c.eval(t, src, nil), nil)
	expect(t, "no keys, args", c.eval(t, src, []string{}, "p", "q"), bytesOf("p", "q"))
	// Through EVALSHA too.
	sc := dlm.NewScript(src)
	r, err := sc.Run(ctx(t), c, keys, "1", "", "3")
	if err != nil {
		t.Fatalf("Script.Run: %v", err)
	}
	expect(t, "Script.Run, 3 keys, 3 args", r, bytesOf(append(slices.Clone(keys), "1", "", "3")...))
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

func testCanceledContext(t *testing.T, c *nodeCase) {
	cx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := c.Eval(cx, c.script("return {1}"), []string{c.key("k")})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Eval with a canceled context: reply %v, error %v; want an error matching context.Canceled", r, err)
	}
	cx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	r, err = c.EvalSHA(cx, dlm.NewScript(c.script("return {1}")).SHA1(), []string{c.key("k")})
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("EvalSHA with an expired deadline: reply %v, error %v; want an error matching context.DeadlineExceeded", r, err)
	}
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
			_, err := c.Eval(cx, busy, busyKeys, strconv.FormatInt(busyFor.Microseconds(), 10))
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
		_, err := c.Eval(cx, c.script("return {1}"), []string{c.key("busy")})
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

func testDeadline(t *testing.T, c *nodeCase) {
	whileBlocked(t, c, func(probe string, keys []string) bool {
		cx, cancel := context.WithTimeout(context.Background(), callLimit)
		defer cancel()
		start := time.Now()
		r, err := c.Eval(cx, probe, keys)
		took := time.Since(start)
		switch {
		case err == nil && took < callLimit:
			return true // answered before the server was blocked
		case err == nil:
			t.Errorf("while the server was blocked, a call with a %v deadline returned a reply %v after %v: the deadline is not enforced", callLimit, r, took.Round(time.Millisecond))
		case took > returnBy:
			t.Errorf("while the server was blocked, a call with a %v deadline returned after %v (error %v): the deadline is not enforced on the connection", callLimit, took.Round(time.Millisecond), err)
		case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("the call that ran out of time returned %v, want an error matching context.DeadlineExceeded", err)
		}
		return false
	})
}

func testCancel(t *testing.T, c *nodeCase) {
	whileBlocked(t, c, func(probe string, keys []string) bool {
		cx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(callLimit, cancel)
		defer timer.Stop()
		defer cancel()
		start := time.Now()
		r, err := c.Eval(cx, probe, keys)
		took := time.Since(start)
		switch {
		case err == nil && took < callLimit:
			return true
		case err == nil:
			t.Errorf("while the server was blocked, a call canceled after %v returned a reply %v after %v: cancellation is ignored", callLimit, r, took.Round(time.Millisecond))
		case took > returnBy:
			t.Errorf("while the server was blocked, a call canceled after %v returned after %v (error %v): cancellation is ignored", callLimit, took.Round(time.Millisecond), err)
		case !errors.Is(err, context.Canceled):
			t.Errorf("the canceled call returned %v, want an error matching context.Canceled", err)
		}
		return false
	})
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
			r, err := c.Eval(cx, src, k, "owner-"+strconv.Itoa(i), "60000")
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
	sc := dlm.NewScript(c.script(`redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
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
				var r []int64
				var err error
				if i%2 == 0 {
					r, err = sc.Run(cx, c, []string{c.key("g" + strconv.Itoa(g))}, strconv.FormatInt(v, 10))
				} else {
					r, err = c.Eval(cx, sc.Source(), []string{c.key("g" + strconv.Itoa(g))}, strconv.FormatInt(v, 10))
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
