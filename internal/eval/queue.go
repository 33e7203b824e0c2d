// The queue: the calls that wait for a run slot, and how they go out.

package eval

import (
	"context"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// spillAfter is the least a call waits for a slot before it goes out in a
// run of its own beyond inFlight: a run stuck on a connection (a half-open
// one, a driver's stall) must not hold back a node's calls until its
// deadline. A call waits four times the node's typical run time when that
// is longer: on a slow node, runs that take long are not stuck.
const spillAfter = 10 * time.Millisecond

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
func (n *Node) Enqueue(ctx context.Context, calls []driver.Call, to Notifier, tag int) bool {
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
