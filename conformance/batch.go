package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/eval"

	"github.com/dlmgo/dlm/conformance/internal/transport"
)

// Rules on batches: Run of several calls.

// largeBatch is the size of the large batch BatchOrder sends.
const largeBatch = 1000

func testBatchOrder(t *testing.T, c *nodeCase) {
	sc := eval.NewScript(c.script(`local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return {tonumber(ARGV[1]), -tonumber(ARGV[1]), n, 9007199254740992}`))
	// Load the script, so every call of the batch runs.
	c.eval(t, sc.Source(), []string{c.key("load")}, "0")
	keys := []string{c.key("a"), c.key("b"), c.key("c")}
	for _, size := range []int{1, 3, largeBatch} {
		calls := make([]driver.Call, size)
		for i := range calls {
			calls[i] = driver.Call{SHA1: sc.SHA1(), Keys: []string{keys[i%len(keys)] + strconv.Itoa(size)}, Args: []string{strconv.Itoa(i*7 + 1)}}
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
	c.Run(ctx(t), []driver.Call{})
}

func testBatchNoScript(t *testing.T, c *nodeCase) {
	unknown := eval.NewScript(c.script("return {tonumber(ARGV[1]) + 1}"))
	batch := func(sha1 string) []driver.Call {
		calls := make([]driver.Call, 5)
		for i := range calls {
			calls[i] = driver.Call{SHA1: sha1, Keys: []string{c.key("k")}, Args: []string{strconv.Itoa(i)}}
		}
		return calls
	}
	calls := batch(unknown.SHA1())
	c.Run(ctx(t), calls)
	settled(t, "Run", calls)
	for i, cl := range calls {
		if !errors.Is(cl.Err, driver.ErrNoScript) {
			t.Errorf("call %d of a script the server lacks: reply %v, error %v; want an error matching driver.ErrNoScript", i+1, cl.Reply, cl.Err)
		}
	}
	// An erroring script fails its own call only, and not as NOSCRIPT.
	failing := eval.NewScript(c.script("if ARGV[1] == '2' then return redis.error_reply('CONFORMANCE error') end return {tonumber(ARGV[1])}"))
	c.eval(t, failing.Source(), []string{c.key("k")}, "0")
	calls = batch(failing.SHA1())
	c.Run(ctx(t), calls)
	settled(t, "Run", calls)
	for i, cl := range calls {
		switch {
		case i == 2 && (cl.Err == nil || errors.Is(cl.Err, driver.ErrNoScript)):
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
	calls := make([]driver.Call, 3)
	for i := range calls {
		calls[i] = driver.Call{Source: c.script("return {1}"), Keys: []string{c.key("k")}}
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

// Sizes of the batch PartReadBatch cuts: fast calls before the slow one,
// and after it.
const (
	cutBefore = 2000
	cutAfter  = 1000
)

// grantScript records a grant of KEYS[1] and replies {1, ARGV[1]}: granted,
// with ARGV[1] as its fence, the shape of a lock's grant.
const grantScript = `redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return {1, tonumber(ARGV[1])}`

// acquireScript grants KEYS[1] to ARGV[1] only when nobody holds it:
// {1, ARGV[2]} (granted, fence ARGV[2]) or {0, 0}.
const acquireScript = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 60000) then
  return {1, tonumber(ARGV[2])}
end
return {0, 0}`

// markedBusyScript is busyScript that first records, in KEYS[2], when it
// started by the server's clock (TIME, microseconds).
const markedBusyScript = transport.BusyClock + `local t = redis.call('TIME')
redis.call('SET', KEYS[2], tonumber(t[1]) * 1000000 + tonumber(t[2]), 'PX', 60000)
local start = now()
while now() - start < tonumber(ARGV[1]) do end
return {1}`

// Replies of the calls before the slow one that the batch must keep when
// the server began the slow call at least keepLead before the deadline.
// The server sends the replies of the calls it read in one go with the slow
// call only after it: up to 16 KB of them (about 120 grant calls, 6% of
// cutBefore); drivers lost at most 7% in measurements. A driver that sends
// a large batch in parts of 128 (as goredis and rueidis do) loses the part
// in flight: the smaller batch on a Cluster node allows for that.
const (
	keepShare = 0.8
	keepPart  = 128
	keepLead  = 100 * time.Millisecond
)

// partReadAllowance is the least time past its deadline PartReadBatch
// allows the cut batch to return in (the time the batch takes without its
// slow call, when longer).
const partReadAllowance = 250 * time.Millisecond

// errPoison is what PartReadBatch writes into the calls once Run returned:
// a Node that writes into them later overwrites it.
var errPoison = errors.New("conformance: written by the caller after Run returned")

// testPartReadBatch runs a batch of thousands of fast grant calls with one
// slow call (a busy script) in the middle, under a deadline that falls
// while the server runs the slow call: the replies of the calls before it
// arrive, the rest are held. The batch must return near its deadline (also
// once replies have begun to arrive), set only the calls' own replies, never
// write into the calls after it returned, keep the replies that arrived
// before the deadline (most of those before the slow call, when the server
// began it well before the deadline), and leave nothing for the next call
// on that node to read: the next Acquire of a key another client holds
// is refused, not granted with a stale reply.
func testPartReadBatch(t *testing.T, c *nodeCase) {
	p := newPartRead(t, c)
	// The batch without its slow call, to see how long this machine takes.
	p.timePlain(t)
	// Another client holds the key the node acquires after the cut batch.
	holder := c.on(c.newNode(t), "holder")
	if holder.Node == nil {
		t.Fatal("newNode returned nil")
	}
	acquire := c.script(acquireScript)
	held := []string{c.key("held")}
	expect(t, "the holder's Acquire of a free key", holder.eval(t, acquire, held, "holder", "2"), []int64{1, 2})

	// The replies kept are checked only when the server began the slow
	// call well before the deadline; on a loaded machine, whose calls
	// before it took most of the deadline to arrive, the batch is cut
	// again with a longer deadline, so that the check is made rather than
	// skipped (a driver that drops the replies passed it under load).
	lates := 0
	for attempt := 1; ; attempt++ {
		calls, start, kept, late := p.runCut(t)
		// The caller owns the calls again: what it writes stays.
		for i := range calls {
			calls[i].Reply, calls[i].Err = nil, errPoison
		}

		// Once the server answers again, the node's next call is its own.
		waitAnswering(t, holder)
		checked := keptArrived(t, holder, p.what, p.busyAt, start.Add(p.deadline), p.before, kept)
		r, err := c.evalCtx(t, ctx(t), acquire, held, "intruder", "3")
		switch {
		case err == nil && len(r) == 2 && r[0] == 1:
			t.Errorf("on the %s node, after the batch cut by its deadline, an Acquire of a key another client holds was granted (reply %s): two holders. The reply is a stale one of the cut batch: a connection with replies still on the way must be closed, not reused", c.which, ints(r))
		case err == nil && !slices.Equal(r, []int64{0, 0}):
			t.Errorf("on the %s node, after the batch cut by its deadline, an Acquire of a key another client holds replied %s, want [0 0]%s", c.which, ints(r), lateHint(nil))
		}
		ownReplies(t, c)
		for i, cl := range calls {
			if cl.Reply != nil || cl.Err != errPoison {
				t.Errorf("%s: call %d was written after Run returned (reply %s, error %v): a Node keeps no reference to the calls once Run returns", p.what, i+1, ints(cl.Reply), cl.Err)
				break
			}
		}
		// A loaded machine may return one cut late; a driver that keeps
		// reading past its deadline does so every time. A late cut is
		// made again with the same deadline, and a second one fails.
		if late != "" {
			lates++
		}
		if late != "" && (lates == 2 || attempt == cutAttempts) {
			t.Error(late)
		}
		if checked && late == "" || attempt == cutAttempts || t.Failed() {
			break
		}
		why := "it returned late (" + late + ")"
		if late == "" {
			why = "the replies kept were not checked"
			p.deadline = min(2*p.deadline, p.maxDeadline)
		}
		p.slow = p.deadline + p.margin
		p.busyAt = c.key("busyat" + strconv.Itoa(attempt+1))
		t.Logf("%s %s: the batch is cut again with a %v deadline", p.what, why, p.deadline.Round(time.Millisecond))
	}
	cutWait(t, c)
}

// How often PartReadBatch cuts its batch, at most, until the server began
// the slow call keepLead before the deadline, and the longest deadline it
// gives the batch then.
const (
	cutAttempts    = 4
	cutMaxDeadline = 6 * time.Second
)

// A partRead is testPartReadBatch's batch: before fast grant calls, the
// slow call, after more; and, once timed, its deadline and how long the
// slow call holds the server.
type partRead struct {
	c              *nodeCase
	grant, busy    *eval.Script
	busyAt         string // the key where the slow call records when it began
	before, after  int
	margin         time.Duration
	plain          time.Duration // the batch without its slow call took
	deadline, slow time.Duration
	maxDeadline    time.Duration // the longest deadline the batch is given
	what           string        // the cut batch, for messages
}

// newPartRead loads the scripts and sizes the batch (smaller on a Cluster).
func newPartRead(t *testing.T, c *nodeCase) *partRead {
	p := &partRead{c: c, grant: eval.NewScript(c.script(grantScript)), busy: eval.NewScript(c.script(markedBusyScript)), busyAt: c.key("busyat")}
	c.eval(t, p.grant.Source(), []string{c.key("load")}, "0")
	c.eval(t, p.busy.Source(), []string{c.key("load"), c.key("loadat")}, "0") // busyAt unset until the cut batch's slow call runs
	// A Cluster's other nodes fail a master over once it has been silent
	// for cluster-node-timeout (2s in the repository's tests): there the
	// batch is smaller, and the slow call holds the server about as long as
	// the other stalling rules do.
	p.before, p.after, p.margin, p.maxDeadline = cutBefore, cutAfter, 3*returnBy, cutMaxDeadline
	if c.info(t, "cluster", "cluster_enabled:") == 1 {
		// The slow call holds the server busyFor at most, whatever the
		// batch took on a loaded machine: held 2.9s, a master was failed
		// (CLUSTERDOWN for the rules after).
		p.before, p.after, p.margin, p.maxDeadline = cutBefore/10, cutAfter/10, returnBy, busyFor-returnBy
	}
	return p
}

// batch returns the batch's calls, with the slow call holding the server
// for slow (none if 0).
func (p *partRead) batch(slow time.Duration) []driver.Call {
	c := p.c
	calls := make([]driver.Call, 0, p.before+1+p.after)
	for i := range p.before + p.after {
		if i == p.before && slow > 0 {
			calls = append(calls, driver.Call{SHA1: p.busy.SHA1(), Keys: []string{c.key("grant"), p.busyAt}, Args: []string{strconv.FormatInt(slow.Microseconds(), 10)}})
		}
		calls = append(calls, driver.Call{SHA1: p.grant.SHA1(), Keys: []string{c.key("grant")}, Args: []string{strconv.Itoa(i + 1)}})
	}
	return calls
}

// timePlain runs the batch without its slow call, checking its replies, and
// from how long it took sets the deadline and how long the slow call holds
// the server.
func (p *partRead) timePlain(t *testing.T) {
	calls := p.batch(0)
	start := time.Now()
	p.c.Run(ctx(t), calls)
	p.plain = time.Since(start)
	settled(t, "Run", calls)
	for i, cl := range calls {
		if want := []int64{1, int64(i + 1)}; cl.Err != nil || !slices.Equal(cl.Reply, want) {
			t.Fatalf("Run of %d calls, call %d: reply %s, error %v; want %s", len(calls), i+1, ints(cl.Reply), cl.Err, ints(want))
		}
	}
	p.deadline = min(max(250*time.Millisecond, 4*p.plain), 3*time.Second, p.maxDeadline)
	// The slow call holds the server well past the deadline, so that a
	// batch that waited for its reply (a read deadline dropped once replies
	// arrived) returns only after the server could answer it, however
	// loaded the machine, while one bounded by its deadline returns long
	// before.
	p.slow = p.deadline + p.margin
}

// runCut runs the batch with its slow call under the deadline and checks
// that it returned before the server could answer the slow call and set
// only the calls' own replies; it returns the calls, when the batch began,
// how many replies it kept and, when it returned past the deadline by more
// than the allowance, why that is late (a loaded machine may stretch the
// return so: testPartReadBatch cuts the batch again, and fails t when the
// last cut is late too).
func (p *partRead) runCut(t *testing.T) (calls []driver.Call, start time.Time, kept int, late string) {
	calls = p.batch(p.slow)
	cx, cancel := context.WithTimeout(context.Background(), p.deadline)
	start = time.Now()
	p.c.Run(cx, calls)
	took := time.Since(start)
	cancel()
	answers := start.Add(p.slow) // the server answers nobody before this
	p.what = fmt.Sprintf("on the %s node, a batch of %d fast calls, one that holds the server %v, then %d more, with a %v deadline,",
		p.c.which, p.before, p.slow.Round(time.Millisecond), p.after, p.deadline.Round(time.Millisecond))
	// The deadline bounds the whole batch: it returns by the deadline plus
	// an allowance for failing the calls left and for a loaded machine,
	// the longer of partReadAllowance and the time the batch took without
	// its slow call (all its replies read and converted).
	allowance := max(partReadAllowance, p.plain)
	switch {
	case took >= p.slow:
		t.Errorf("%s returned after %v, once the server could answer its slow call: the deadline must bound the whole batch, also once its first replies arrived (a read deadline dropped after the first bytes?)", p.what, took.Round(time.Millisecond))
	case took > p.deadline+allowance:
		late = fmt.Sprintf("%s returned after %v, %v past its deadline, more than the %v allowed (the longer of %v and the %v the batch took without its slow call): the deadline must bound the whole batch, also once its first replies arrived (no grace period for replies still on the way)",
			p.what, took.Round(time.Millisecond), (took - p.deadline).Round(time.Millisecond), allowance.Round(time.Millisecond), partReadAllowance, p.plain.Round(time.Millisecond))
	}
	settled(t, "Run", calls)
	for i, cl := range calls {
		switch {
		case cl.Err != nil:
		case i < p.before && slices.Equal(cl.Reply, []int64{1, int64(i + 1)}):
			kept++
		case time.Now().Before(answers):
			t.Errorf("%s: call %d has reply %s, error %v; want [1 %d] or an error (replies mixed up between calls?)", p.what, i+1, ints(cl.Reply), cl.Err, i+1)
		}
	}
	t.Logf("%s returned after %v with %d replies kept (the batch without its slow call took %v)", p.what, took.Round(time.Millisecond), kept, p.plain.Round(time.Millisecond))
	return calls, start, kept, late
}

// keptArrived fails t when the cut batch kept fewer than keepShare of the
// replies of its calls before the slow one, although the server began the
// slow call (as the script recorded in busyAt) at least keepLead before the
// deadline: their replies had arrived. The lead is measured on each clock
// apart, the server's from then to now and the suite's from the deadline to
// now, so the clocks need not agree. It reports whether it checked the
// replies kept (not when the slow call did not run, or began later).
func keptArrived(t *testing.T, holder *nodeCase, what, busyAt string, deadline time.Time, before, kept int) bool {
	t.Helper()
	r := holder.eval(t, `local t = redis.call('TIME')
return {tonumber(redis.call('GET', KEYS[1]) or '-1'), tonumber(t[1]) * 1000000 + tonumber(t[2])}`, []string{busyAt})
	sinceDeadline := time.Since(deadline)
	if len(r) != 2 || r[0] < 0 {
		t.Logf("%s: the slow call did not run (reply %s): the replies kept are not checked", what, ints(r))
		return false
	}
	lead := time.Duration(r[1]-r[0])*time.Microsecond - sinceDeadline
	if lead < keepLead {
		t.Logf("%s the server began the slow call %v before the deadline, less than %v: the replies kept are not checked", what, lead.Round(time.Millisecond), keepLead)
		return false
	}
	if want := min(int(keepShare*float64(before)), before-keepPart); kept < want {
		t.Errorf("%s kept %d replies of the %d calls before the slow one, want at least %d: the server began the slow call %v before the deadline, so their replies had arrived, and a Node keeps the replies that arrived when the context ends (a client that sets the error that cut a pipeline on every command loses them)",
			what, kept, before, want, lead.Round(time.Millisecond))
	} else {
		t.Logf("%s the server began the slow call %v before the deadline", what, lead.Round(time.Millisecond))
	}
	return true
}

// cutWait is PartReadBatch through RunWait: a grant, then WAIT for one
// replica more than the server has, cut by the deadline after the grant's
// reply arrived; once WAIT has timed out and replied, the node's next calls
// must get their own replies. Skipped when RunWait is unsupported.
func cutWait(t *testing.T, c *nodeCase) {
	t.Helper()
	const waitFor = 400 * time.Millisecond
	cx, cancel := context.WithTimeout(context.Background(), callLimit)
	replicas := int(max(c.info(t, "replication", "connected_slaves:"), 0)) + 1
	calls := []driver.Call{{Source: c.script(grantScript), Keys: []string{c.key("waited")}, Args: []string{"997"}}}
	start := time.Now()
	acks, err := c.RunWait(cx, calls, driver.Wait{Replicas: replicas, Timeout: waitFor})
	cancel()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		t.Logf("RunWait reports errors.ErrUnsupported: the cut RunWait is not checked")
		return
	case err == nil && acks.Replicas >= replicas:
		t.Logf("WAIT %d answered %+v: a replica connected meanwhile; the cut RunWait is not checked", replicas, acks)
		return
	}
	settled(t, "RunWait", calls)
	// WAIT replies once its timeout passed: a connection kept with it
	// unread would hand that reply to the next call.
	time.Sleep(time.Until(start.Add(waitFor + 100*time.Millisecond)))
	waitAnswering(t, c)
	ownReplies(t, c)
}

// testBatchRunsOnce runs a batch of scripts the server has (sent by EVAL,
// and by EVALSHA after) mixed with one it lacks: each call of the known
// scripts runs exactly once, the others fail with driver.ErrNoScript and do
// not run (a driver's own NOSCRIPT fallback must not run the batch again).
func testBatchRunsOnce(t *testing.T, c *nodeCase) {
	known := eval.NewScript(c.script("return {redis.call('INCR', KEYS[1]), redis.call('PEXPIRE', KEYS[1], 60000)}"))
	lacking := eval.NewScript(c.script("return {redis.call('INCR', KEYS[1]) + 1000, redis.call('PEXPIRE', KEYS[1], 60000)}"))
	calls := make([]driver.Call, 30)
	for i := range calls {
		keys := []string{c.key("n" + strconv.Itoa(i))}
		switch i % 3 {
		case 0:
			calls[i] = driver.Call{Source: known.Source(), Keys: keys}
		case 1:
			calls[i] = driver.Call{SHA1: known.SHA1(), Keys: keys}
		default:
			calls[i] = driver.Call{SHA1: lacking.SHA1(), Keys: keys}
		}
	}
	c.Run(ctx(t), calls)
	settled(t, "Run", calls)
	count := c.script("return {tonumber(redis.call('GET', KEYS[1]) or '0')}")
	for i, cl := range calls {
		runs := c.eval(t, count, cl.Keys)
		switch {
		case i%3 != 2 && (cl.Err != nil || !slices.Equal(cl.Reply, []int64{1, 1})):
			t.Errorf("call %d of a batch mixing cached scripts with one the server lacks: reply %s, error %v; want [1 1]", i+1, ints(cl.Reply), cl.Err)
		case i%3 == 2 && !errors.Is(cl.Err, driver.ErrNoScript):
			t.Errorf("call %d of a batch, whose script the server lacks: reply %s, error %v; want an error matching driver.ErrNoScript", i+1, ints(cl.Reply), cl.Err)
		}
		if want := int64(1 - i%3/2); !slices.Equal(runs, []int64{want}) {
			t.Errorf("call %d of a batch mixing cached scripts with one the server lacks ran %s times, want %d: a Node runs every call at most once, and a NOSCRIPT fallback of its own must not run the calls that already ran", i+1, ints(runs), want)
		}
	}
}
