package dlm

import (
	"context"
	"errors"
	"sync"
	"time"
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
// One goroutine per Manager renews all its locks, in batches: locks due
// within half a renewal period of each other are renewed together, through
// the strategy's ExtendMany (one pipelined round trip per node for every
// thousand locks). A renewal that the servers refuse (ErrNotHeld) ends the
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

// A renewer renews the locks of one Manager from one goroutine.
type renewer struct {
	s        Strategy
	ttl      time.Duration
	period   time.Duration // renew this long after validity was confirmed
	maxHold  time.Duration
	observer Observer

	mu      sync.Mutex
	locks   map[*Lock]struct{}
	running bool
	kick    chan struct{}
	settled chan struct{} // made by removeSettled, closed when a batch ends
}

func newRenewer(s Strategy, o options) *renewer {
	if o.renewFraction == 0 {
		return nil
	}
	return &renewer{
		s: s, ttl: o.ttl, maxHold: o.maxHold, observer: o.observer,
		period: max(time.Duration(float64(o.ttl)*o.renewFraction), time.Millisecond),
		locks:  map[*Lock]struct{}{}, kick: make(chan struct{}, 1),
	}
}

// add starts renewing l, whose validity was confirmed at l.base.
func (r *renewer) add(l *Lock) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l.renewing, l.due = true, l.base.Add(r.period)
	r.locks[l] = struct{}{}
	if !r.running {
		r.running = true
		go r.loop()
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// remove stops renewing l.
func (r *renewer) remove(l *Lock) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.renewing {
		l.renewing = false
		delete(r.locks, l)
	}
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
	if l.renewing {
		l.renewing = false
		delete(r.locks, l)
	}
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
	defer timer.Stop()
	for {
		r.mu.Lock()
		if len(r.locks) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		var first time.Time
		for l := range r.locks {
			if !l.inflight && (first.IsZero() || l.due.Before(first)) {
				first = l.due
			}
		}
		var batch []*Lock
		if !first.After(now) {
			// Renew with it everything due within half a period, so that
			// locks taken at different times fall into step.
			horizon := now.Add(r.period / 2)
			for l := range r.locks {
				if !l.inflight && !l.due.After(horizon) {
					l.inflight = true
					batch = append(batch, l)
				}
			}
		}
		r.mu.Unlock()
		if len(batch) > 0 {
			r.renew(batch)
			continue
		}
		timer.Reset(time.Until(first))
		select {
		case <-timer.C:
		case <-r.kick:
			timer.Stop() // since Go 1.23 no stale value is left to drain
		}
	}
}

// renew extends batch and applies the results.
func (r *renewer) renew(batch []*Lock) {
	start := time.Now()
	live := batch[:0:0]
	var drop []*Lock
	var first time.Time // the earliest end of a live lease
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
	results := make([]ExtendResult, len(live))
	if len(live) > 0 {
		// The batch ends a quarter period before the first lease would: a
		// node that stalls fails its own locks' renewals, while replies
		// that came from the others are applied in time to keep theirs.
		deadline := first.Add(-r.period / 4)
		if bound := start.Add(max(r.period, attemptBound)); bound.Before(deadline) {
			deadline = bound
		}
		if floor := start.Add(r.period / 4); deadline.Before(floor) {
			deadline = floor
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		keys := make([]HeldKey, len(live))
		for i, l := range live {
			keys[i] = HeldKey{Key: l.key, Token: l.token}
		}
		for lo := 0; lo < len(keys); lo += renewBatch {
			hi := min(lo+renewBatch, len(keys))
			copy(results[lo:hi], r.s.ExtendMany(ctx, keys[lo:hi], r.ttl))
		}
		cancel()
	}
	retry := min(max(r.period/4, 5*time.Millisecond), renewRetry)
	now := time.Now()
	ended := make([]bool, len(live))
	o := r.observer
	for i, l := range live {
		res := results[i]
		if o != nil {
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
		ended[i] = l.ended != nil
		l.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range drop {
		l.inflight = false
		if l.renewing {
			l.renewing = false
			delete(r.locks, l)
		}
	}
	for i, l := range live {
		l.inflight = false
		switch {
		case !l.renewing: // unlocked meanwhile
		case ended[i]:
			l.renewing = false
			delete(r.locks, l)
		case results[i].Err == nil:
			l.due = start.Add(r.period)
		default:
			l.due = now.Add(retry)
		}
	}
	if r.settled != nil {
		close(r.settled)
		r.settled = nil
	}
}
