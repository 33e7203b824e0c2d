// Package coalesce sends concurrent script calls bound for one node
// together: while a node's calls are in flight, the calls that arrive wait,
// and go out as one Run — one pipelined round trip — as soon as a slot
// frees, or after 10ms (or four times the node's typical run time, if
// longer) in a run of their own: a run stuck on one connection does not
// hold back the node. An uncontended call goes out at once, on its caller's goroutine:
// nothing waits for company, and the batch size follows the load (how many
// calls arrived during one round trip). On a node that routes every call
// to one server (nodekit.RoutingOneServer), RunWait calls with the same
// Wait are coalesced likewise: their calls, then one WAIT that covers them
// all. Calls of the scripts New was given are merged where the node's
// routing allows: see merge.go.
//
// Each caller keeps its own deadline: a caller whose context ends while its
// calls wait or are in flight returns at once, its calls failed with the
// context's error, as a Node's Run promises; calls still waiting are then
// never sent. A batch runs under a context that ends when the latest of its
// callers' deadlines passes, or when every caller has gone; Callers finds
// the callers' own contexts through it (for their values, such as a trace
// span).
package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
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

	runs, batched atomic.Int64 // Runs sent to the node, and callers' runs they carried
	runTime       atomic.Int64 // a running average of a run's duration, in ns
}

// New returns a Node that coalesces node's calls, with at most inFlight
// runs in flight (DefaultInFlight when inFlight < 1), and merges calls of
// the scripts given (see merge.go) where node's routing allows.
func New(node dlm.Node, inFlight int, merge ...*nodekit.Script) *Node {
	if inFlight < 1 {
		inFlight = DefaultInFlight
	}
	routing := nodekit.RoutingOf(node)
	return &Node{Node: node, inFlight: inFlight, waits: routing == nodekit.RoutingOneServer, merge: newMerger(routing, merge)}
}

// Routing implements nodekit.Router: the node beneath's.
func (n *Node) Routing() nodekit.Routing { return nodekit.RoutingOf(n.Node) }

// A waiter is one caller's Run or RunWait waiting or in a batch.
type waiter struct {
	ctx   context.Context
	calls []dlm.Call
	wait  *dlm.Wait     // RunWait's; nil for Run
	done  chan struct{} // closed once calls (and acks, err) hold the results

	acks dlm.Acks // RunWait's results
	err  error

	mu   sync.Mutex
	gone bool // the caller returned on its context: leave calls alone

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
// free, else with the next batch.
func (n *Node) run(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (dlm.Acks, error) {
	n.mu.Lock()
	if n.busy < n.inFlight {
		n.busy++
		n.mu.Unlock()
		n.batched.Add(1)
		return n.send(ctx, calls, w)
	}
	wt := &waiter{ctx: ctx, calls: calls, wait: w, done: make(chan struct{})}
	n.queue = append(n.queue, wt)
	n.mu.Unlock()
	spill := time.NewTimer(max(spillAfter, 4*time.Duration(n.runTime.Load())))
	defer spill.Stop()
	for done := false; !done; {
		select {
		case <-wt.done:
			return wt.acks, wt.err
		case <-spill.C:
			n.spill()
		case <-ctx.Done():
			done = true
		}
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	select {
	case <-wt.done:
		return wt.acks, wt.err // the results came in meanwhile
	default:
	}
	wt.gone = true
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, ctx.Err()
	}
	return dlm.Acks{}, ctx.Err()
}

// send runs calls (and w's wait) on the node in a slot the caller took, and
// hands the slot on when the run returns or, if sooner, when ctx ends: a
// node that keeps a call past its context (a driver ignoring deadlines)
// does not hold back the calls behind it.
func (n *Node) send(ctx context.Context, calls []dlm.Call, w *dlm.Wait) (dlm.Acks, error) {
	n.runs.Add(1)
	var freed atomic.Bool
	free := func() {
		if freed.CompareAndSwap(false, true) {
			n.next()
		}
	}
	if ctx.Done() != nil {
		defer context.AfterFunc(ctx, free)()
	}
	defer free()
	defer func(start time.Time) {
		avg := n.runTime.Load()
		n.runTime.Store(avg + (int64(time.Since(start))-avg)/8) // races lose an update, no more
	}(time.Now())
	if n.merge == nil || len(calls) < 2 {
		return n.runOn(ctx, calls, w)
	}
	root, _ := ctx.Value(callersKey{}).(*batchRoot)
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

// spill sends the calls that wait in a run beyond inFlight.
func (n *Node) spill() {
	n.mu.Lock()
	if len(n.queue) == 0 {
		n.mu.Unlock()
		return
	}
	n.busy++
	n.dispatch() // unlocks
}

// next frees a slot, or hands it to the calls that wait.
func (n *Node) next() {
	n.mu.Lock()
	if len(n.queue) == 0 {
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
	n.mu.Unlock()
	go n.runBatch(batch, size)
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
	for _, w := range batch {
		w.mu.Lock()
		if !w.gone { // w.calls is the caller's until it returns
			live = append(live, w)
			for _, c := range w.calls {
				calls = append(calls, dlm.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args})
			}
		}
		w.mu.Unlock()
	}
	if len(live) == 0 {
		n.next()
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	n.batched.Add(int64(len(live)))
	acks, err := n.send(ctx, calls, live[0].wait)
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
			close(w.done)
		}
		w.mu.Unlock()
		i += len(w.calls)
	}
}

// batchContext ends when the latest of the waiters' deadlines passes (never,
// if one of them has none) or when every waiter's context has ended.
func batchContext(ws []*waiter) (context.Context, context.CancelFunc) {
	ws[0].batch = ws
	ctx, cancel := context.WithCancel((*batchRoot)(ws[0]))
	var latest time.Time
	bounded := true
	left := atomic.Int64{}
	left.Store(int64(len(ws)))
	stops := make([]func() bool, 0, len(ws))
	for _, w := range ws {
		if d, ok := w.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(latest) {
			latest = d
		}
		stops = append(stops, context.AfterFunc(w.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	stop := func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
	if !bounded {
		return ctx, stop
	}
	dctx, dcancel := context.WithDeadline(ctx, latest)
	return dctx, func() { dcancel(); stop() }
}

// Stats reports how many Runs went to the node and how many callers' runs
// they carried: their ratio is the mean batch size.
func (n *Node) Stats() (runs, carried int64) { return n.runs.Load(), n.batched.Load() }

// A batchRoot is the parent of a batch's context: never done, without
// values but the batch's callers (Callers). It is the batch's first waiter,
// so that making it allocates nothing.
type batchRoot waiter

type callersKey struct{}

func (*batchRoot) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*batchRoot) Done() <-chan struct{}       { return nil }
func (*batchRoot) Err() error                  { return nil }
func (r *batchRoot) Value(key any) any {
	if key == (callersKey{}) {
		return r
	}
	return nil
}
func (*batchRoot) String() string { return "coalesce.batch" }

// Callers reports whether ctx is the context of a coalesced Run or RunWait,
// and then calls f, in order, for each caller whose calls it carries, with
// the caller's context, how many of its calls the Run carries, and the
// indexes, in the Run's calls, of the calls that carry them (one call may
// carry several callers' calls: see merge.go). A caller's context may have
// ended.
func Callers(ctx context.Context, f func(ctx context.Context, own int, calls []int)) bool {
	r, ok := ctx.Value(callersKey{}).(*batchRoot)
	if !ok {
		return false
	}
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
	return true
}
