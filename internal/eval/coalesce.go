// Package eval is how dlm's strategies and helpers run their Lua scripts
// on a driver.Node: a Script runs by its SHA1 (EVALSHA), by its source when
// the server lacks it; Slot names the Cluster hash slot a key lives in; and
// a Node (Coalesce) sends the concurrent script calls bound for one node
// together. Drivers do not use it: what they share is in nodekit.
//
// Coalescing: while a node's calls are in flight, the calls that arrive wait,
// and go out as one Run — one pipelined round trip — as soon as a slot
// frees, or after 10ms (or four times the node's typical run time, if
// longer, but not past a quarter of the time a caller's context leaves it)
// in a run of their own: a run stuck on one connection, or kept past its
// context by a driver, does not hold back the node. An uncontended call
// goes out at once, on its caller's goroutine: nothing waits for company,
// and the batch size follows the load (how many calls arrived during one
// round trip). A serial caller's call makes no allocation and no goroutine
// or channel hop here. (A mode that measured whether coalescing paid, and
// sent calls each by itself while it did not, went: in a same-run
// benchmark coalescing always did as well or better, and its trials of
// calls by themselves burst connections and failed calls with short
// deadlines; see docs/performance.md.) On a node that routes every call
// to one server (nodekit.RoutingOneServer), RunWait calls with the same
// Wait are coalesced likewise: their calls, then one WAIT that covers them
// all. Calls of the scripts Coalesce was given are merged where the node's
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
package eval

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/internal/runner"
	"github.com/dlmgo/dlm/nodekit"
)

// DefaultInFlight is how many runs a Node lets one node have in flight at a
// time before calls wait to be coalesced.
const DefaultInFlight = 2

// maxBatch bounds the calls of one coalesced Run (a single caller's Run may
// be longer; it is never split).
const maxBatch = 512

// Node is a driver.Node whose Run (and, on one server, RunWait) coalesces
// concurrent calls. Watch goes straight to the node beneath.
type Node struct {
	driver.Node
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
func Coalesce(node driver.Node, inFlight int, merge ...*Script) *Node {
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
	calls []driver.Call
	wait  *driver.Wait  // RunWait's; nil for Run
	done  chan struct{} // closed once calls (and acks, err) hold the results
	// notify, of calls queued by Enqueue, is told instead, with tag (done
	// is nil): no goroutine waits for them.
	notify Notifier
	tag    int
	// spillAt is when the waiter's calls go out in a run of their own if
	// no slot came free by then.
	spillAt time.Time

	acks driver.Acks // RunWait's results
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

// Run implements driver.Node.
func (n *Node) Run(ctx context.Context, calls []driver.Call) {
	if len(calls) > 0 {
		n.run(ctx, calls, nil)
	}
}

// RunWait implements driver.Node.
func (n *Node) RunWait(ctx context.Context, calls []driver.Call, w driver.Wait) (driver.Acks, error) {
	if !n.waits || len(calls) == 0 {
		return n.Node.RunWait(ctx, calls, w)
	}
	return n.run(ctx, calls, &w)
}

// run sends calls, and w's wait when w is not nil, at once when a slot is
// free or coalescing is off, else with the next batch.
func (n *Node) run(ctx context.Context, calls []driver.Call, w *driver.Wait) (driver.Acks, error) {
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
	return driver.Acks{}, ctx.Err()
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
func (n *Node) send(ctx context.Context, calls []driver.Call, w *driver.Wait) (driver.Acks, error) {
	n.runs.Add(1)
	if n.merge == nil || len(calls) < 2 {
		return n.runOn(ctx, calls, w)
	}
	root, _ := ctx.Value(nodekit.BatchKey{}).(*batchRoot)
	return n.merge.runMerged(ctx, calls, w != nil, func(sent []driver.Call, where []int) (driver.Acks, error) {
		if root != nil {
			root.where = where // read by Callers during the Run; Runs of a batch are sequential
		}
		return n.runOn(ctx, sent, w)
	})
}

// runOn runs calls, and w's wait when w is not nil, on the node beneath.
func (n *Node) runOn(ctx context.Context, calls []driver.Call, w *driver.Wait) (driver.Acks, error) {
	if w == nil {
		n.Node.Run(ctx, calls)
		return driver.Acks{}, nil
	}
	return n.Node.RunWait(ctx, calls, *w)
}

// Stats reports how many Runs went to the node and how many callers' runs
// they carried: their ratio is the mean batch size.
func (n *Node) Stats() (runs, carried int64) { return n.runs.Load(), n.batched.Load() }
