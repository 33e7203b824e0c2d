package dlm

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// WithAutoRenew makes the Manager renew every lock it hands out until the
// lock is unlocked or lost. A lock is renewed once fraction of the TTL has
// passed since its validity was last confirmed (fraction in (0, 1); 1/3 is a
// good choice: two renewals can fail before the lease runs out). Renewal
// stops once a lock has been held for maxHold (> 0); its lease then runs out
// within one TTL and its context ends with a cause matching ErrLost and
// ErrMaxHold. maxHold is the one bound
// on holding a lock: it also bounds Lock.Extend.
//
// One goroutine per Manager renews all its locks, in batches: when a lock
// is due, it is renewed together with the locks due within half a renewal
// period after it, through the strategy's ExtendMany, a thousand locks per
// call (one pipelined round trip per node), one call at a time.
// Taking, renewing and releasing a lock costs the same however many the
// Manager holds (the renewer keeps its locks in a heap by due time). A renewal that the servers refuse (ErrNotHeld) ends the
// lock's context at once with ErrLost; one that fails otherwise (a node
// down, a failover under way) is retried a quarter period later (at most
// 250ms), each attempt bounded by a renewal period (at least 2s), until
// the validity runs out. A lock therefore rides through an outage of its
// node (a failover, until the client reaches the new primary) of up to
// TTL·(1−fraction) minus the drift margin and the retry spacing, whenever
// in the renewal period it starts; see docs/failover-time.md. Auto-renewal
// is off by default.
func WithAutoRenew(fraction float64, maxHold time.Duration) Option {
	return Option{func(o *options) error {
		if !(fraction > 0 && fraction < 1) {
			return invalidf("WithAutoRenew(%v, %v): fraction must be in (0, 1)", fraction, maxHold)
		}
		if maxHold <= 0 {
			return invalidf("WithAutoRenew(%v, %v): maximum hold time must be positive", fraction, maxHold)
		}
		o.renewFraction, o.maxHold = fraction, maxHold
		return nil
	}}
}

// renewBatch is the most locks one ExtendMany call renews: a strategy bounds
// each call by its per-node timeout, and a pipeline of this many extensions
// stays well inside it even on a loaded machine.
const renewBatch = 1000

// renewRetry is the longest wait before a failed renewal is tried again:
// the new primary of a failover is used at most this long after it serves.
const renewRetry = 250 * time.Millisecond

// attemptBound is the shortest bound on one renewal attempt: an attempt
// also ends after a renewal period, so that a node that stopped answering
// (a dead machine's connections hang, they are not refused) cannot use up
// the whole lease in one call while its replica takes over.
const attemptBound = 2 * time.Second

// A renewer renews the locks of one Manager from one goroutine, which
// takes batches of due locks from a heap ordered by due time, renews them
// and puts them back with their next due times. Adding, removing and
// taking a lock cost O(log n) in the n locks registered, under a mutex
// held for no longer. (Batches run one at a time: with two or four under
// way, a Manager holding 500,000 locks at a TTL of 10s renewed them no
// sooner, and took other locks at a half or a third of the rate, the
// renewals holding both of the node's coalescing slots; bench -scale.)
type renewer struct {
	s        driver.Strategy
	ttl      time.Duration
	period   time.Duration // renew this long after validity was confirmed
	maxHold  time.Duration
	observer Observer
	epoch    time.Time // due times are nanoseconds since it, on the monotonic clock

	mu      sync.Mutex
	due     dueHeap // registered locks not being renewed, by due time
	running bool    // the loop's goroutine exists
	// wakeAt is when the loop will next look at due by itself: the time
	// its timer is set for, or math.MinInt64 while it is awake. add wakes
	// the loop only for a lock due before it.
	wakeAt   int64
	addWakes int // adds that woke the loop (for tests)
	kick     chan struct{}
	settled  chan struct{} // made by removeSettled, closed when a batch ends
}

func newRenewer(s driver.Strategy, o options) *renewer {
	if o.renewFraction == 0 {
		return nil
	}
	return &renewer{
		s: s, ttl: o.ttl, maxHold: o.maxHold, observer: o.observer, epoch: time.Now(),
		period: max(time.Duration(float64(o.ttl)*o.renewFraction), time.Millisecond),
		kick:   make(chan struct{}, 1),
	}
}

// at is t as a due time.
func (r *renewer) at(t time.Time) int64 { return int64(t.Sub(r.epoch)) }

// add starts renewing l, whose validity was confirmed at l.base.
func (r *renewer) add(l *Lock) {
	if r == nil {
		return
	}
	at := r.at(l.base.Add(r.period))
	r.mu.Lock()
	l.renewing = true
	r.due.push(l, at)
	wake := false
	if !r.running {
		r.running = true
		go r.loop()
	} else {
		if wake = at < r.wakeAt; wake {
			r.addWakes++
		}
	}
	r.mu.Unlock()
	if wake {
		r.wake()
	}
}

// wake makes the loop look at the heap again.
func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// removeLocked stops renewing l. Called with r.mu held.
func (r *renewer) removeLocked(l *Lock) {
	if l.renewing {
		l.renewing = false
		if !l.inflight { // else its batch drops it
			r.due.remove(int(l.hidx))
		}
	}
}

// remove stops renewing l.
func (r *renewer) remove(l *Lock) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.removeLocked(l)
	r.mu.Unlock()
}

// removeSettled stops renewing l and waits, within ctx, until no renewal
// of l is under way: one sent before would reset its TTL after a change
// sent now.
func (r *renewer) removeSettled(ctx context.Context, l *Lock) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(l)
	for l.inflight {
		if r.settled == nil {
			r.settled = make(chan struct{})
		}
		ch := r.settled
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			r.mu.Lock()
			return
		}
		r.mu.Lock()
	}
}

func (r *renewer) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		r.mu.Lock()
		r.wakeAt = math.MinInt64
		if len(r.due) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		now := r.at(time.Now())
		if head := r.due[0].at; head > now {
			r.wakeAt = head
			r.mu.Unlock()
			timer.Reset(time.Duration(head - now))
			select {
			case <-timer.C:
			case <-r.kick:
				timer.Stop() // since Go 1.23 no stale value is left to drain
			}
			continue
		}
		// Renew with it what is due within half a period, so that locks
		// taken at different times fall into step.
		horizon := now + int64(r.period/2)
		batch := make([]*Lock, 0, min(len(r.due), renewBatch))
		for len(r.due) > 0 && len(batch) < renewBatch && r.due[0].at <= horizon {
			l := r.due.remove(0)
			l.inflight = true
			batch = append(batch, l)
		}
		r.mu.Unlock()
		r.renew(batch)
	}
}

// renew extends batch and applies the results.
func (r *renewer) renew(batch []*Lock) {
	start := time.Now()
	live, drop, first := r.triage(batch, start)
	results := r.extend(live, start, first)
	retry := min(max(r.period/4, 5*time.Millisecond), renewRetry)
	next, again := r.at(start.Add(r.period)), r.at(time.Now().Add(retry))
	due := r.apply(live, results, next, again)
	r.requeue(drop, live, due)
}

// triage splits batch into the locks to renew (live) and those to drop:
// ended, released, or held for the maximum hold time (which caps them).
// first is the earliest end of a live lease.
func (r *renewer) triage(batch []*Lock, start time.Time) (live, drop []*Lock, first time.Time) {
	live = batch[:0:0]
	for _, l := range batch {
		l.mu.Lock()
		switch {
		case l.ended != nil || l.released || l.expireLocked():
			drop = append(drop, l)
		case start.Sub(l.base) >= r.maxHold:
			l.capped = true
			drop = append(drop, l)
		default:
			live = append(live, l)
			if first.IsZero() || l.lease.Until.Before(first) {
				first = l.lease.Until
			}
		}
		l.mu.Unlock()
	}
	return live, drop, first
}

// extend renews live, begun at start, in one ExtendMany call, and returns
// one result per lock. The call ends a quarter period before the first
// lease would (first): a node that stalls fails its own locks' renewals,
// while replies that came from the others are applied in time to keep
// theirs. It is bounded by a renewal period (at least attemptBound), and
// given at least a quarter period.
func (r *renewer) extend(live []*Lock, start, first time.Time) []driver.ExtendResult {
	results := make([]driver.ExtendResult, len(live))
	if len(live) == 0 {
		return results
	}
	deadline := first.Add(-r.period / 4)
	if bound := start.Add(max(r.period, attemptBound)); bound.Before(deadline) {
		deadline = bound
	}
	if floor := start.Add(r.period / 4); deadline.Before(floor) {
		deadline = floor
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	keys := make([]driver.HeldKey, len(live))
	for i, l := range live {
		keys[i] = driver.HeldKey{Key: l.key, Token: l.token}
	}
	copy(results, r.s.ExtendMany(ctx, keys, r.ttl))
	return results
}

// leaseEnded is the due time apply gives a lock whose lease has ended.
const leaseEnded = math.MinInt64

// apply adopts each live lock's result, reports it to the Observer, and
// returns when each lock is next due: next after a renewal, again after a
// failure that left its lease running, leaseEnded once its lease ended.
func (r *renewer) apply(live []*Lock, results []driver.ExtendResult, next, again int64) []int64 {
	due := make([]int64, len(live))
	for i, l := range live {
		res := results[i]
		if o := r.observer; o != nil {
			o.Renewed(l.key, res.Err)
		}
		l.mu.Lock()
		switch {
		case res.Err == nil:
			l.lastErr = nil
			l.setLeaseLocked(res.Lease)
		case errors.Is(res.Err, ErrNotHeld):
			l.lostLocked(res.Err)
		default:
			l.lastErr = res.Err
			l.expireLocked()
		}
		switch {
		case l.ended != nil:
			due[i] = leaseEnded
		case res.Err == nil:
			due[i] = next
		default:
			due[i] = again
		}
		l.mu.Unlock()
	}
	return due
}

// requeue ends a batch: it puts back in the heap, at their due times
// (apply), the live locks that are still registered and whose leases
// run, forgets the others and the dropped ones, and wakes the
// removeSettled calls that wait for a batch to end.
func (r *renewer) requeue(drop, live []*Lock, due []int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range drop {
		l.inflight, l.renewing = false, false
	}
	for i, l := range live {
		l.inflight = false
		switch {
		case !l.renewing: // unlocked meanwhile
		case due[i] == leaseEnded:
			l.renewing = false
		default:
			r.due.push(l, due[i])
		}
	}
	if r.settled != nil {
		close(r.settled)
		r.settled = nil
	}
}

// A dueHeap is a 4-ary min-heap of locks by due time; each lock knows its
// index (Lock.hidx), so that it can be removed in O(log n). Four children
// per node: half the depth of a binary heap, and a node's children share
// a cache line.
type dueHeap []dueEntry

type dueEntry struct {
	at int64 // due time (renewer.at)
	l  *Lock
}

// set puts e at i.
func (h dueHeap) set(i int, e dueEntry) {
	h[i] = e
	e.l.hidx = int32(i)
}

func (h *dueHeap) push(l *Lock, at int64) {
	*h = append(*h, dueEntry{})
	h.up(len(*h)-1, dueEntry{at, l})
}

// up puts e at i or above.
func (h dueHeap) up(i int, e dueEntry) {
	for i > 0 {
		p := (i - 1) / 4
		if h[p].at <= e.at {
			break
		}
		h.set(i, h[p])
		i = p
	}
	h.set(i, e)
}

// down puts e at i or below.
func (h dueHeap) down(i int, e dueEntry) {
	n := len(h)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+4, n); j++ {
			if h[j].at < h[m].at {
				m = j
			}
		}
		if h[m].at >= e.at {
			break
		}
		h.set(i, h[m])
		i = m
	}
	h.set(i, e)
}

// remove takes the lock at i out of the heap and returns it.
func (h *dueHeap) remove(i int) *Lock {
	old := *h
	l, last := old[i].l, len(old)-1
	e := old[last]
	old[last] = dueEntry{}
	*h = old[:last]
	if i != last {
		if i > 0 && e.at < old[(i-1)/4].at {
			h.up(i, e)
		} else {
			h.down(i, e)
		}
	}
	// Give memory back once the heap has shrunk to a quarter.
	if c := cap(*h); c > 1024 && last < c/4 {
		*h = append(make(dueHeap, 0, c/2), *h...)
	}
	return l
}
