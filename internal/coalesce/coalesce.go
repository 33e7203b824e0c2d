// Package coalesce sends concurrent script calls bound for one node
// together: while a node's calls are in flight, the calls that arrive wait,
// and go out as one Run — one pipelined round trip — as soon as a slot
// frees, or after 10ms (or four times the node's typical run time, if
// longer, but not past a quarter of the time a caller's context leaves it)
// in a run of their own: a run stuck on one connection, or kept past its
// context by a driver, does not hold back the node. An uncontended call goes out at once, on its caller's goroutine:
// nothing waits for company, and the batch size follows the load (how many
// calls arrived during one round trip). A serial caller's call makes no
// allocation and no goroutine or channel hop here. (A Node that measured
// whether coalescing paid, and sent calls each by itself while it did not,
// went: in a same-run benchmark coalescing always did as well or better,
// 64 goroutines over go-redis and rueidis, one node and Redlock's five, and
// its trials of sending calls by themselves burst connections and failed
// calls with short deadlines; see docs/performance.md.) On a node that routes every call
// to one server (nodekit.RoutingOneServer), RunWait calls with the same
// Wait are coalesced likewise: their calls, then one WAIT that covers them
// all. Calls of the scripts New was given are merged where the node's
// routing allows (see Merging, below).
//
// Each caller keeps its own deadline, and does not spend it waiting for a
// batch it could have skipped: a call whose context leaves it less than
// two of the node's typical run times (one to wait for a slot, one for its
// batch) goes out at once by itself, in one of at most inFlight runs
// beyond the slots, and a call waits for a slot at most a quarter of the
// time its context leaves it. A caller whose context ends while its
// calls wait or are in flight returns at once, its calls failed with the
// context's error, as a Node's Run promises; calls still waiting are then
// never sent. A batch runs under a context that ends when the latest of its
// callers' deadlines passes, or when every caller has gone; Callers finds
// the callers' own contexts through it (for their values, such as a trace
// span).
package coalesce

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/runner"
	"github.com/dlmgo/dlm/nodekit"
)

// DefaultInFlight is how many runs a Node lets one node have in flight at a
// time before calls wait to be coalesced.
const DefaultInFlight = 2

// maxBatch bounds the calls of one coalesced Run (a single caller's Run may
// be longer; it is never split).
const maxBatch = 512

// Node is a dlm.Node whose Run (and, on one server, RunWait) coalesces
// concurrent calls. Watch goes straight to the node beneath.
type Node struct {
	dlm.Node
	inFlight int
	waits    bool    // RunWait calls may be coalesced: the node routes every call to one server
	merge    *merger // nil: nothing merges

	mu    sync.Mutex
	busy  int       // runs in flight (beyond inFlight after a spill)
	queue []*waiter // calls waiting for a slot; non-empty only when busy >= inFlight

	flights []flight // callers' own runs in flight with a deadline
	seq     uint64   // of the last flight

	// One timer spills the queue when its first waiter's time to spill
	// comes (see run): a timer per waiting call costs two allocations and
	// a timer-heap update each.
	spillTimer *time.Timer // nil until a call first waits
	spillAt    time.Time   // when spillTimer fires; zero: stopped

	runners *runner.Pool[pending] // run batches; a goroutine per batch grew its stack anew each time

	runs, batched atomic.Int64 // Runs sent to the node, and callers' runs they carried
	runTime       atomic.Int64 // a running average of a run's duration, in ns
}

// New returns a Node that coalesces node's calls, with at most inFlight
// runs in flight (DefaultInFlight when inFlight < 1), and merges calls of
// the scripts given (see BodyMark) where node's routing allows.
func New(node dlm.Node, inFlight int, merge ...*nodekit.Script) *Node {
	if inFlight < 1 {
		inFlight = DefaultInFlight
	}
	routing := nodekit.RoutingOf(node)
	n := &Node{Node: node, inFlight: inFlight, waits: routing == nodekit.RoutingOneServer, merge: newMerger(routing, merge)}
	n.runners = runner.New(func(p pending) { n.runBatch(p.batch, p.size) })
	return n
}

// Routing implements nodekit.Router: the node beneath's.
func (n *Node) Routing() nodekit.Routing { return nodekit.RoutingOf(n.Node) }

// A waiter is one caller's Run or RunWait waiting or in a batch.
type waiter struct {
	ctx   context.Context
	calls []dlm.Call
	wait  *dlm.Wait     // RunWait's; nil for Run
	done  chan struct{} // closed once calls (and acks, err) hold the results
	// notify, of calls queued by Enqueue, is told instead, with tag (done
	// is nil): no goroutine waits for them.
	notify Notifier
	tag    int
	// spillAt is when the waiter's calls go out in a run of their own if
	// no slot came free by then.
	spillAt time.Time

	acks dlm.Acks // RunWait's results
	err  error

	mu   sync.Mutex
	gone bool // the caller returned on its context: leave calls alone
	// in is the batch the waiter's calls went in, once they did: a caller
	// that returns on its context counts itself out of it.
	in *batchLeft

	batch []*waiter // of the first waiter of a batch: the batch's live waiters
	// where, of the first waiter of a batch, maps each of the batch's
	// calls, in the waiters' order, to the call that carries it in the Run
	// under way (merging puts several in one; −1: not in this Run); nil
	// while the Run carries each call itself, in order.
	where []int
}

// Run implements dlm.Node.
func (n *Node) Run(ctx context.Context, calls []dlm.Call) {
	if len(calls) > 0 {
		n.run(ctx, calls, nil)
	}
}

// RunWait implements dlm.Node.
func (n *Node) RunWait(ctx context.Context, calls []dlm.Call, w dlm.Wait) (dlm.Acks, error) {
	if !n.waits || len(calls) == 0 {
		return n.Node.RunWait(ctx, calls, w)
	}
	return n.run(ctx, calls, &w)
}

// run sends calls, and w's wait when w is not nil, at once when a slot is
// free or coalescing is off, else with the next batch.
func (n *Node) run(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (dlm.Acks, error) {
	now := time.Now()
	n.mu.Lock()
	if n.busy < n.inFlight || n.busy-n.overdueLocked() < n.inFlight || n.pressed(ctx, now) {
		n.busy++
		var seq uint64 // of this run in n.flights; 0: not there
		if d, ok := ctx.Deadline(); ok {
			n.seq++
			seq = n.seq
			n.flights = append(n.flights, flight{deadline: d, seq: seq})
		}
		n.mu.Unlock()
		n.batched.Add(1)
		// Nothing here allocates (once n.flights has grown): a serial
		// caller pays for coalescing no more than two uncontended lock
		// operations and a clock read.
		defer n.finish(now, seq)
		return n.send(ctx, calls, w)
	}
	wt := n.queueLocked(ctx, &waiter{ctx: ctx, calls: calls, wait: w, done: make(chan struct{})}, now)
	n.mu.Unlock()
	select {
	case <-wt.done:
		return wt.acks, wt.err
	case <-ctx.Done():
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	select {
	case <-wt.done:
		return wt.acks, wt.err // the results came in meanwhile
	default:
	}
	wt.gone = true
	if wt.in != nil && wt.in.n.Add(-1) == 0 {
		wt.in.cancel() // every caller of the batch has gone
	}
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, ctx.Err()
	}
	return dlm.Acks{}, ctx.Err()
}

// goAlone is how many of the node's typical run times a call's context
// must leave it for the call to wait for a slot: it waits for the end of a
// run in flight, then its batch runs. A call with less time left goes out
// at once by itself, unless inFlight such calls are out already: on a
// loaded machine the typical run grows, and if every call then went alone
// the node would get more round trips, each slower, and the runs would
// grow longer still.
const goAlone = 2

// pressed reports whether ctx leaves a call that arrives at now too
// little time to wait for a slot (see goAlone), and a run beyond the slots
// is left for it. It is asked, with n.mu held, only when no slot is free.
func (n *Node) pressed(ctx context.Context, now time.Time) bool {
	if n.busy >= 2*n.inFlight {
		return false
	}
	d, ok := ctx.Deadline()
	return ok && d.Sub(now) < goAlone*time.Duration(n.runTime.Load())
}

// queueLocked puts wt in the queue for the next batch. Called with n.mu
// held.
func (n *Node) queueLocked(ctx context.Context, wt *waiter, now time.Time) *waiter {
	// A node whose runs take long waits longer before spilling, but never
	// past a quarter of the time the caller has: runs kept past their
	// callers' deadlines (a driver ignoring them) hold their slots, a call
	// with a short deadline would otherwise never be sent, and a call's
	// deadline is for its run, not for the wait.
	wait := max(spillAfter, 4*time.Duration(n.runTime.Load()))
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, d.Sub(now)/4)
	}
	wt.spillAt = now.Add(wait)
	n.queue = append(n.queue, wt)
	n.armSpillLocked(wt.spillAt)
	return wt
}

// A Notifier is told when calls it queued with Enqueue hold their replies.
type Notifier interface {
	Notify(tag int)
}

// Enqueue is Run for a caller that does not wait for the results itself:
// when no slot is free, it puts calls in the queue for
// the next batch and reports true, and to.Notify(tag) is then called once,
// from the batch's goroutine, when calls hold their replies (or ctx's
// error, when ctx ended before the batch was sent); when a slot is free it
// does nothing (it allocates nothing) and reports false, and the caller
// sends calls with Run. A caller that waits for several nodes at once (a
// Redlock round) so saves a goroutine's two hand-offs per queued call.
// Unlike a Run's, ctx's cancellation does not cut short a batch already
// sent, which ends at its calls' latest deadline.
func (n *Node) Enqueue(ctx context.Context, calls []dlm.Call, to Notifier, tag int) bool {
	if len(calls) == 0 {
		return false
	}
	now := time.Now()
	n.mu.Lock()
	if n.busy < n.inFlight || n.busy-n.overdueLocked() < n.inFlight || n.pressed(ctx, now) {
		n.mu.Unlock()
		return false
	}
	n.queueLocked(ctx, &waiter{ctx: ctx, calls: calls, notify: to, tag: tag}, now)
	n.mu.Unlock()
	return true
}

// finish records a caller's own run that began at start, and frees its
// slot or hands it on.
func (n *Node) finish(start time.Time, seq uint64) {
	now := time.Now()
	avg := n.runTime.Load()
	n.runTime.Store(avg + (int64(now.Sub(start))-avg)/8) // races lose an update, no more
	if seq != 0 {
		n.mu.Lock()
		for i, f := range n.flights {
			if f.seq == seq {
				last := len(n.flights) - 1
				n.flights[i] = n.flights[last]
				n.flights = n.flights[:last]
				break
			}
		}
		n.mu.Unlock()
	}
	n.next()
}

// A flight is a caller's own run in flight, with its context's deadline.
type flight struct {
	deadline time.Time
	seq      uint64
}

// overdueLocked counts the callers' own runs still in flight past their
// contexts' deadlines (a driver that ignores them): their slots count as
// free, as a batch's slot is freed when its context ends. Called with
// n.mu held.
func (n *Node) overdueLocked() int {
	if len(n.flights) == 0 {
		return 0
	}
	now, k := time.Now(), 0
	for _, f := range n.flights {
		if now.After(f.deadline) {
			k++
		}
	}
	return k
}

// send runs calls (and w's wait) on the node, in a slot the caller holds.
func (n *Node) send(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (dlm.Acks, error) {
	n.runs.Add(1)
	if n.merge == nil || len(calls) < 2 {
		return n.runOn(ctx, calls, w)
	}
	root, _ := ctx.Value(nodekit.BatchKey{}).(*batchRoot)
	return n.merge.runMerged(ctx, calls, w != nil, func(sent []dlm.Call, where []int) (dlm.Acks, error) {
		if root != nil {
			root.where = where // read by Callers during the Run; Runs of a batch are sequential
		}
		return n.runOn(ctx, sent, w)
	})
}

// runOn runs calls, and w's wait when w is not nil, on the node beneath.
func (n *Node) runOn(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (dlm.Acks, error) {
	if w == nil {
		n.Node.Run(ctx, calls)
		return dlm.Acks{}, nil
	}
	return n.Node.RunWait(ctx, calls, *w)
}

// spillAfter is the least a call waits for a slot before it goes out in a
// run of its own beyond inFlight: a run stuck on a connection (a half-open
// one, a driver's stall) must not hold back a node's calls until its
// deadline. A call waits four times the node's typical run time when that
// is longer: on a slow node, runs that take long are not stuck.
const spillAfter = 10 * time.Millisecond

// spill, the spill timer's function, sends the calls that wait in a run
// beyond inFlight.
func (n *Node) spill() {
	n.mu.Lock()
	if !n.spillAt.IsZero() && time.Now().Before(n.spillAt) {
		n.mu.Unlock() // a firing the timer's re-arming came too late to stop
		return
	}
	n.spillAt = time.Time{}
	if len(n.queue) == 0 {
		n.mu.Unlock()
		return
	}
	n.busy++
	n.dispatch() // unlocks
}

// armSpillLocked has the spill timer fire at at, unless it fires sooner.
// It is called with n.mu held.
func (n *Node) armSpillLocked(at time.Time) {
	switch {
	case !n.spillAt.IsZero() && !at.Before(n.spillAt):
	case n.spillTimer == nil:
		n.spillAt, n.spillTimer = at, time.AfterFunc(time.Until(at), n.spill)
	default:
		n.spillAt = at
		n.spillTimer.Reset(time.Until(at))
	}
}

// next frees a slot of a run that ended, or hands it to the calls that
// wait. A slot beyond inFlight (a spill's or a pressed call's) is freed, so
// that the runs in flight come back to inFlight.
func (n *Node) next() {
	n.mu.Lock()
	if len(n.queue) == 0 || n.busy > n.inFlight {
		n.busy--
		n.mu.Unlock()
		return
	}
	n.dispatch()
}

// dispatch takes a batch from the queue into a slot the caller holds for it,
// and sends it. It is called with n.mu held, and unlocks it.
func (n *Node) dispatch() {
	// The batch: waiters of the first one's kind (Run, or RunWait with the
	// same Wait), in order, up to maxBatch calls.
	first := n.queue[0]
	var batch []*waiter
	size := 0
	rest := n.queue[:0]
	for _, w := range n.queue {
		if sameKind(w, first) && (len(batch) == 0 || size+len(w.calls) <= maxBatch) {
			batch = append(batch, w)
			size += len(w.calls)
			continue
		}
		rest = append(rest, w)
	}
	clear(n.queue[len(rest):])
	n.queue = rest
	// The spill timer is for the waiters left, if any.
	if n.spillTimer != nil && !n.spillAt.IsZero() {
		n.spillTimer.Stop()
		n.spillAt = time.Time{}
	}
	for _, w := range rest {
		n.armSpillLocked(w.spillAt)
	}
	n.mu.Unlock()
	n.runners.Go(pending{batch, size})
}

// A pending batch waits for a runner.
type pending struct {
	batch []*waiter
	size  int
}

// sameKind reports whether a and b may share a batch.
func sameKind(a, b *waiter) bool {
	return (a.wait == nil) == (b.wait == nil) && (a.wait == nil || *a.wait == *b.wait)
}

// runBatch sends the calls of the batch's waiters still there in one Run
// (or one RunWait), and then hands its slot on.
func (n *Node) runBatch(batch []*waiter, size int) {
	live := batch[:0]
	calls := make([]dlm.Call, 0, size)
	var late []*waiter // Enqueue's, whose contexts ended in the queue
	for _, w := range batch {
		w.mu.Lock()
		if w.notify != nil && w.ctx.Err() != nil {
			w.gone = true
			for i := range w.calls {
				w.calls[i].Reply, w.calls[i].Err = nil, w.ctx.Err()
			}
			late = append(late, w)
		}
		if !w.gone { // w.calls is the caller's until it returns
			live = append(live, w)
			for _, c := range w.calls {
				calls = append(calls, dlm.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args})
			}
		}
		w.mu.Unlock()
	}
	for _, w := range late {
		w.notify.Notify(w.tag)
	}
	if len(live) == 0 {
		n.next()
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	n.batched.Add(int64(len(live)))
	acks, err := n.sendBatch(ctx, calls, live[0].wait)
	i := 0
	for _, w := range live {
		w.mu.Lock()
		if !w.gone {
			w.acks, w.err = acks, nil
			for j := range w.calls {
				c := calls[i+j]
				w.calls[j].Reply, w.calls[j].Err = c.Reply, c.Err
				if c.Err != nil && w.err == nil {
					w.err = c.Err
				}
			}
			if w.err == nil {
				// The wait's error, or another waiter's failed call, after
				// which the driver may not have waited: as a failed wait
				// (the caller undoes its calls).
				w.err = err
			}
			if w.notify == nil {
				close(w.done)
			}
		}
		w.mu.Unlock()
		i += len(w.calls)
		if w.notify != nil {
			w.notify.Notify(w.tag)
		}
	}
}

// sendBatch sends a batch that carries callers' runs in a slot taken for
// it, and hands the slot on when the run returns or, if sooner, when ctx
// ends: a node that keeps a batch past its context (a driver ignoring
// deadlines) does not hold back the calls behind it. (A caller's own run,
// sent at once, registers nothing on its context: once past its deadline
// its slot counts as free for the calls that arrive, see overdueLocked.)
func (n *Node) sendBatch(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (dlm.Acks, error) {
	start := time.Now()
	var freed atomic.Bool
	free := func() {
		if freed.CompareAndSwap(false, true) {
			n.next()
		}
	}
	defer context.AfterFunc(ctx, free)()
	acks, err := n.send(ctx, calls, w)
	avg := n.runTime.Load()
	n.runTime.Store(avg + (int64(time.Since(start))-avg)/8)
	free()
	return acks, err
}

// A batchLeft counts the callers of a batch that have not gone.
type batchLeft struct {
	n      atomic.Int64
	cancel context.CancelFunc
}

// batchContext ends when the latest of the waiters' deadlines passes (never,
// if one of them has none) or when every waiter's caller has gone (each
// counts itself out in run); it cannot end when none of their contexts can.
// It is called before any of ws's callers can see the batch, and marks them
// as in it.
func batchContext(ws []*waiter) (context.Context, context.CancelFunc) {
	ws[0].batch = ws
	if !slices.ContainsFunc(ws, func(w *waiter) bool { return w.ctx.Done() != nil }) {
		// No caller can go: a driver needs no goroutine to await the batch.
		return (*batchRoot)(ws[0]), func() {}
	}
	ctx, cancel := context.WithCancel((*batchRoot)(ws[0]))
	left := &batchLeft{cancel: cancel}
	left.n.Store(int64(len(ws)))
	var latest time.Time
	bounded := true
	for _, w := range ws {
		if d, ok := w.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(latest) {
			latest = d
		}
	}
	for _, w := range ws {
		w.mu.Lock()
		if w.gone { // went since runBatch looked
			left.n.Add(-1)
		} else {
			w.in = left
		}
		w.mu.Unlock()
	}
	if left.n.Load() == 0 {
		cancel()
	}
	if !bounded {
		return ctx, cancel
	}
	dctx, dcancel := context.WithDeadline(ctx, latest)
	return dctx, func() { dcancel(); cancel() }
}

// Stats reports how many Runs went to the node and how many callers' runs
// they carried: their ratio is the mean batch size.
func (n *Node) Stats() (runs, carried int64) { return n.runs.Load(), n.batched.Load() }

// A batchRoot is the parent of a batch's context: never done, without
// values but the batch itself, a nodekit.Batch under nodekit.BatchKey. It
// is the batch's first waiter, so that making it allocates nothing.
type batchRoot waiter

func (*batchRoot) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*batchRoot) Done() <-chan struct{}       { return nil }
func (*batchRoot) Err() error                  { return nil }
func (r *batchRoot) Value(key any) any {
	if key == (nodekit.BatchKey{}) {
		return r
	}
	return nil
}
func (*batchRoot) String() string { return "coalesce.batch" }

// Callers implements nodekit.Batch (one call may carry several callers'
// calls: see Merging).
func (r *batchRoot) Callers(f func(ctx context.Context, own int, calls []int)) {
	at := 0
	for _, w := range r.batch {
		var idx []int
		for j := at; j < at+len(w.calls); j++ {
			k := j
			if r.where != nil {
				k = r.where[j]
			}
			if k >= 0 && (len(idx) == 0 || idx[len(idx)-1] != k) {
				idx = append(idx, k)
			}
		}
		own := len(w.calls)
		if r.where != nil {
			own = 0
			for _, k := range r.where[at : at+len(w.calls)] {
				if k >= 0 {
					own++
				}
			}
		}
		at += len(w.calls)
		f(w.ctx, own, idx)
	}
}

// Merging: calls of one script with the same number of keys and arguments,
// in one Run, bound for one server, go as one invocation of a batch form of
// the script that runs each of them in turn. A Redis server spends more on
// invoking a small script than on the commands inside it, so a lock pair
// costs it about half as much in batches (BenchmarkCoalescing's server
// µs/pair). Each call keeps its own keys, arguments and reply; one that
// raises an error inside the batch, or whose batch the server refuses as a
// whole (CROSSSLOT, TRYAGAIN, MOVED: keys of several slots, or of a slot in
// migration), is sent again by itself, so its caller sees the server's own
// reply.
//
// Merged calls go ahead of the calls sent by themselves, so only the first
// call of each key in a Run may merge: every key's calls keep their order
// (an undo's release must not overtake its acquisition). Calls of different
// keys may be reordered.

// BodyMark is a line that may part a merged script's source: the prelude
// before it (local functions, defined once per batch), the body after it
// (run once per call).
const BodyMark = "-- body\n"

// batchOf returns the batch form of a script that replies with an integer
// or an array of integers: ARGV[1] and ARGV[2] are each call's key and
// argument counts, written as strings of that length (countText), KEYS and
// the rest of ARGV the calls' keys and arguments in turn. The reply holds, for each call,
// the length of its reply and its reply (an integer n as 1, n), or −1 when
// it raised an error.
//
// A server runs each Lua instruction at the cost of tens of its own, and
// grows a table at the cost of hundreds: the loop reads the counts without
// tonumber (a strtod), sizes its tables when it makes them, and counts the
// reply's length rather than asking for it.
func batchOf(src string) string {
	prelude, body, ok := strings.Cut(src, BodyMark)
	if !ok {
		prelude, body = "", src
	}
	return prelude + "local function one(KEYS, ARGV)\n" + body + `
end
local KEYS, ARGV = KEYS, ARGV
local nk, na, out, n, a = #ARGV[1], #ARGV[2], {}, 0, 2
local keys, args = {nil, nil, nil, nil}, {nil, nil, nil, nil}
for k = 0, #KEYS - nk, nk do
  for i = 1, nk do keys[i] = KEYS[k + i] end
  for i = 1, na do args[i] = ARGV[a + i] end
  a = a + na
  local ok, r = pcall(one, keys, args)
  local ty = ok and type(r)
  if ty == 'number' then
    out[n + 1] = 1
    out[n + 2] = r
    n = n + 2
  elseif ty == 'table' then
    local m = #r
    out[n + 1] = m
    for i = 1, m do out[n + 1 + i] = r[i] end
    n = n + 1 + m
  else
    n = n + 1
    out[n] = -1
  end
end
return out
`
}

// countText returns n as batchOf reads a count: a string of n bytes.
func countText(n int) string {
	const xs = "xxxxxxxxxxxxxxxx"
	if n <= len(xs) {
		return xs[:n]
	}
	return strings.Repeat("x", n)
}

// merger knows the batch forms of the scripts a Node merges.
type merger struct {
	batch      map[string]*batch // by the script's SHA1
	slots      bool              // merge only calls of one hash slot
	crossSlots atomic.Bool       // a one-server node refused keys of several slots: it is a Cluster node
}

// A batch is the batch form of a script.
type batch struct {
	*nodekit.Script
	// cached: the server ran it by EVALSHA, or by EVAL since it last
	// replied NOSCRIPT; until then it goes by EVAL, so that a RunWait
	// never meets NOSCRIPT in steady state (its WAIT would then be lost).
	cached atomic.Bool
}

func newMerger(routing nodekit.Routing, scripts []*nodekit.Script) *merger {
	if routing == nodekit.RoutingUnknown || len(scripts) == 0 {
		return nil
	}
	m := &merger{batch: make(map[string]*batch, len(scripts)), slots: routing == nodekit.RoutingBySlot}
	for _, s := range scripts {
		m.batch[s.SHA1()] = &batch{Script: nodekit.NewScript(batchOf(s.Source()))}
	}
	return m
}

// A group is calls that share one batch invocation.
type group struct {
	members []int // indexes in the caller's calls
	sent    int   // index of the batch call in the calls sent
	batch   *batch
}

type groupKey struct {
	sha    string
	nk, na int
	slot   int
}

// plan returns the calls to send for calls, and the groups merged among
// them; it returns calls itself when nothing merges.
func (m *merger) plan(calls []dlm.Call) ([]dlm.Call, []group) {
	bySlot := m.slots || m.crossSlots.Load()
	// Small batches, the usual ones, look keys and groups up by scanning:
	// a map costs its allocation and its random seed on every batch.
	var seen map[string]struct{}
	if len(calls) > smallPlan {
		seen = make(map[string]struct{}, len(calls))
	}
	var idx map[groupKey]int // → index in groups, once there are many
	var groups []group
	var keys []groupKey // of groups, while idx is nil
	for i, c := range calls {
		if len(c.Keys) == 0 {
			continue
		}
		if seenKey(seen, calls[:i], c.Keys[0]) {
			continue // not moved ahead of an earlier call of its key
		}
		if seen != nil {
			seen[c.Keys[0]] = struct{}{}
		}
		if c.SHA1 == "" || m.batch[c.SHA1] == nil {
			continue
		}
		k := groupKey{sha: c.SHA1, nk: len(c.Keys), na: len(c.Args), slot: -1}
		if bySlot {
			k.slot = nodekit.Slot(c.Keys[0])
		}
		g, ok := -1, false
		if idx != nil {
			g, ok = idx[k]
		} else if g = slices.Index(keys, k); g >= 0 {
			ok = true
		}
		if !ok {
			g = len(groups)
			groups = append(groups, group{})
			switch {
			case idx != nil:
				idx[k] = g
			case len(keys) < smallPlan:
				keys = append(keys, k)
			default:
				idx = make(map[groupKey]int, 2*smallPlan)
				for j, kj := range keys {
					idx[kj] = j
				}
				idx[k] = g
			}
		}
		groups[g].members = append(groups[g].members, i)
	}
	merged := groups[:0]
	for _, g := range groups {
		if len(g.members) > 1 {
			merged = append(merged, g)
		}
	}
	if len(merged) == 0 {
		return calls, nil
	}
	inGroup := make([]bool, len(calls))
	sent := make([]dlm.Call, 0, len(calls))
	for gi := range merged {
		g := &merged[gi]
		first := calls[g.members[0]]
		nk, na := len(first.Keys), len(first.Args)
		keys := make([]string, 0, nk*len(g.members))
		args := make([]string, 2, 2+na*len(g.members))
		args[0], args[1] = countText(nk), countText(na)
		for _, i := range g.members {
			inGroup[i] = true
			keys = append(keys, calls[i].Keys...)
			args = append(args, calls[i].Args...)
		}
		g.sent, g.batch = len(sent), m.batch[first.SHA1]
		c := dlm.Call{Keys: keys, Args: args}
		if g.batch.cached.Load() {
			c.SHA1 = g.batch.SHA1()
		} else {
			c.Source = g.batch.Source()
		}
		sent = append(sent, c)
	}
	for i, c := range calls {
		if !inGroup[i] {
			sent = append(sent, dlm.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args})
		}
	}
	return sent, merged
}

// smallPlan is the most calls (and groups) plan looks up by scanning.
const smallPlan = 16

// seenKey reports whether key is the first key of a call of before: in
// seen when it is not nil, else by scanning before.
func seenKey(seen map[string]struct{}, before []dlm.Call, key string) bool {
	if seen != nil {
		_, ok := seen[key]
		return ok
	}
	for _, c := range before {
		if len(c.Keys) > 0 && c.Keys[0] == key {
			return true
		}
	}
	return false
}

// runMerged runs calls through run (the node's Run, or, when waits is set,
// its RunWait with one wait), merging what it can, and sets every call's
// Reply or Err. run gets the calls to send and where each of calls went
// among them (−1: not sent in this run; nil: each sent itself, in order).
// Calls sent again go through run too; the acknowledgements returned are
// then the least of the runs', and the error the first run's when it had
// one (a RunWait's caller then undoes its calls). A batch that
// met NOSCRIPT is sent again by EVAL after a Run; after a RunWait its
// calls fail with NOSCRIPT, which their callers handle (nodekit.Script).
func (m *merger) runMerged(ctx context.Context, calls []dlm.Call, waits bool, run func(sent []dlm.Call, where []int) (dlm.Acks, error)) (dlm.Acks, error) {
	sent, groups := m.plan(calls)
	if groups == nil {
		return run(calls, nil)
	}
	where := make([]int, len(calls))
	j := len(groups)
	for i := range where {
		where[i] = -1
	}
	for gi, g := range groups {
		for _, i := range g.members {
			where[i] = gi
		}
	}
	for i := range where {
		if where[i] < 0 {
			where[i], j = j, j+1
		}
	}
	acks, err := run(sent, where)
	// again sends cs, which carry the calls of calls listed in of (one list
	// per call of cs).
	again := func(cs []dlm.Call, of [][]int) {
		w := make([]int, len(calls))
		for i := range w {
			w[i] = -1
		}
		for k, is := range of {
			for _, i := range is {
				w[i] = k
			}
		}
		a, e := run(cs, w)
		acks.Replicas, acks.Local = min(acks.Replicas, a.Replicas), acks.Local && a.Local
		if err == nil {
			err = e
		}
	}
	var loads []int // batches the server had not cached: nothing of theirs ran
	for gi, g := range groups {
		switch e := sent[g.sent].Err; {
		case e == nil:
			g.batch.cached.Store(true)
		case errors.Is(e, dlm.ErrNoScript):
			g.batch.cached.Store(false)
			if !waits {
				loads = append(loads, gi)
			}
		}
	}
	if len(loads) > 0 {
		cs := make([]dlm.Call, len(loads))
		of := make([][]int, len(loads))
		for j, gi := range loads {
			c := sent[groups[gi].sent]
			cs[j] = dlm.Call{Source: groups[gi].batch.Source(), Keys: c.Keys, Args: c.Args}
			of[j] = groups[gi].members
		}
		again(cs, of)
		for j, gi := range loads {
			sent[groups[gi].sent].Reply, sent[groups[gi].sent].Err = cs[j].Reply, cs[j].Err
		}
	}
	for i := range calls {
		if where[i] >= len(groups) { // sent by itself
			calls[i].Reply, calls[i].Err = sent[where[i]].Reply, sent[where[i]].Err
		}
	}
	var retry []int // calls to send again by themselves
	for _, g := range groups {
		b := sent[g.sent]
		if b.Err != nil {
			if ctx.Err() != nil || errors.Is(b.Err, dlm.ErrNoScript) || !refusedAsWhole(b.Err) {
				for _, i := range g.members {
					calls[i].Reply, calls[i].Err = nil, b.Err
				}
				continue
			}
			if strings.Contains(b.Err.Error(), "CROSSSLOT") {
				m.crossSlots.Store(true)
			}
			retry = append(retry, g.members...)
			continue
		}
		r := b.Reply
		for _, i := range g.members {
			if len(r) == 0 || r[0] < 0 || r[0] > int64(len(r)-1) {
				retry = append(retry, i) // raised an error, or a malformed reply
				if len(r) > 0 && r[0] < 0 {
					r = r[1:]
				} else {
					r = nil
				}
				continue
			}
			n := int(r[0])
			calls[i].Reply, calls[i].Err = r[1:1+n:1+n], nil
			r = r[1+n:]
		}
	}
	if len(retry) > 0 && ctx.Err() == nil {
		cs := make([]dlm.Call, len(retry))
		of := make([][]int, len(retry))
		for j, i := range retry {
			cs[j] = dlm.Call{SHA1: calls[i].SHA1, Source: calls[i].Source, Keys: calls[i].Keys, Args: calls[i].Args}
			of[j] = []int{i}
		}
		again(cs, of)
		for j, i := range retry {
			calls[i].Reply, calls[i].Err = cs[j].Reply, cs[j].Err
		}
	} else {
		for _, i := range retry {
			calls[i].Reply, calls[i].Err = nil, ctx.Err()
		}
	}
	return acks, err
}

// refusedAsWhole reports whether err is a server's refusal of a batch call
// for the keys it names together, before it ran anything.
func refusedAsWhole(err error) bool {
	s := err.Error()
	for _, p := range []string{"CROSSSLOT", "TRYAGAIN", "MOVED", "ASK "} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}
