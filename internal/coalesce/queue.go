// The queue: the run slots, and the calls that wait for one.

package coalesce

import "time"

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
