// Batches: sending the calls that waited, in one Run, under a context
// that lives as long as their callers need it.

package eval

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm/nodekit"
)

// runBatch sends the calls of the batch's waiters still there in one Run
// (or one RunWait), and then hands its slot on.
func (n *Node) runBatch(batch []*waiter, size int) {
	live := batch[:0]
	calls := make([]driver.Call, 0, size)
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
				calls = append(calls, driver.Call{SHA1: c.SHA1, Source: c.Source, Keys: c.Keys, Args: c.Args})
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
func (n *Node) sendBatch(ctx context.Context, calls []driver.Call, w *driver.Wait) (driver.Acks, error) {
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
