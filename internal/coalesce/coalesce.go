// Package coalesce sends concurrent script calls bound for one node
// together: while a node's calls are in flight, the calls that arrive wait,
// and go out as one Run — one pipelined round trip — as soon as a slot
// frees. An uncontended call goes out at once, on its caller's goroutine:
// nothing waits for company, and the batch size follows the load (how many
// calls arrived during one round trip).
//
// Each caller keeps its own deadline: a caller whose context ends while its
// calls wait or are in flight returns at once, its calls failed with the
// context's error, as a Node's Run promises; calls still waiting are then
// never sent. A batch runs under a context that ends when the latest of its
// callers' deadlines passes, or when every caller has gone.
package coalesce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm"
)

// DefaultInFlight is how many runs a Node lets one node have in flight at a
// time before calls wait to be coalesced.
const DefaultInFlight = 2

// maxBatch bounds the calls of one coalesced Run (a single caller's Run may
// be longer; it is never split).
const maxBatch = 512

// Node is a dlm.Node whose Run coalesces concurrent calls. RunWait and
// Watch go straight to the node beneath.
type Node struct {
	dlm.Node
	inFlight int

	mu    sync.Mutex
	busy  int       // runs in flight
	queue []*waiter // calls waiting for a slot; non-empty only when busy == inFlight

	runs, batched atomic.Int64 // Runs sent to the node, and callers' runs they carried
}

// New returns a Node that coalesces node's calls, with at most inFlight
// runs in flight (DefaultInFlight when inFlight < 1).
func New(node dlm.Node, inFlight int) *Node {
	if inFlight < 1 {
		inFlight = DefaultInFlight
	}
	return &Node{Node: node, inFlight: inFlight}
}

// A waiter is one caller's Run waiting or in a batch.
type waiter struct {
	ctx   context.Context
	calls []dlm.Call
	done  chan struct{} // closed once calls hold their results

	mu   sync.Mutex
	gone bool // the caller returned on its context: leave calls alone
}

// Run implements dlm.Node.
func (n *Node) Run(ctx context.Context, calls []dlm.Call) {
	if len(calls) == 0 {
		return
	}
	n.mu.Lock()
	if n.busy < n.inFlight {
		n.busy++
		n.mu.Unlock()
		n.batched.Add(1)
		n.send(ctx, calls)
		return
	}
	w := &waiter{ctx: ctx, calls: calls, done: make(chan struct{})}
	n.queue = append(n.queue, w)
	n.mu.Unlock()
	select {
	case <-w.done:
		return
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.done:
		return // the results came in meanwhile
	default:
	}
	w.gone = true
	for i := range calls {
		calls[i].Reply, calls[i].Err = nil, ctx.Err()
	}
}

// send runs calls on the node in a slot the caller took, and hands the slot
// on when the run returns or, if sooner, when ctx ends: a node that keeps a
// call past its context (a driver ignoring deadlines) does not hold back
// the calls behind it.
func (n *Node) send(ctx context.Context, calls []dlm.Call) {
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
	n.Node.Run(ctx, calls)
	free()
}

// next frees a slot, or hands it to the calls that wait.
func (n *Node) next() {
	n.mu.Lock()
	if len(n.queue) == 0 {
		n.busy--
		n.mu.Unlock()
		return
	}
	k, size := 0, 0
	for k < len(n.queue) && (k == 0 || size+len(n.queue[k].calls) <= maxBatch) {
		size += len(n.queue[k].calls)
		k++
	}
	batch := append([]*waiter(nil), n.queue[:k]...)
	n.queue = append(n.queue[:0], n.queue[k:]...)
	n.mu.Unlock()
	go n.runBatch(batch, size)
}

// runBatch sends the calls of the batch's waiters still there in one Run,
// and then hands its slot on.
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
	n.send(ctx, calls)
	i := 0
	for _, w := range live {
		w.mu.Lock()
		if !w.gone {
			for j := range w.calls {
				w.calls[j].Reply, w.calls[j].Err = calls[i+j].Reply, calls[i+j].Err
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
	ctx, cancel := context.WithCancel(context.Background())
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
