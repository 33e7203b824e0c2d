package dlm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// The per-key wait queue. Lock calls of one Manager that wait for the same
// key queue up in arrival order, and a new call joins the end of a queue
// instead of trying ahead of it. When the strategy can watch releases, the queue
// subscribes to the key's release notifications and each notification wakes
// the first waiter only, which then tries within one round trip of the
// release. Other processes' waiters each get their own notification; when
// other processes contend, the first waiter is woken after a random delay
// of up to 300µs or the longest recent attempt, whichever is longer, so
// that the fixed order in which Redis notifies subscribers does not pick
// the same winner every time, and so that attempts over slow nodes (which
// split the votes when they overlap) follow each other. On such a key,
// each failed attempt is followed by a random back-off whose span doubles
// with each failure (up to 32 attempt durations, at most 4 maximum retry
// delays), whatever notifications come meanwhile: on Redlock each failed
// attempt undoes its partial grants, whose release announcements woke
// every other process's waiter, which tried at once and split the votes
// again (8 processes over 5 nodes, 3 of them delaying requests 0–150ms:
// 9–12 grants in 20s, and 59–87 with the back-off; TestContention in
// internal/sim).
//
// When this Manager unlocks a key its own Lock calls wait for, and the
// strategy is a Handoff, the lock passes straight to the first waiter in
// the Unlock's round trip, with a fence of its own, instead of being
// released and taken again. So that waiters of other processes are not
// shut out, a run of such hand-offs lasts at most the maximum retry delay
// and is followed by a release after which this Manager's waiters wake
// as on a contended key (below), and there are none while other processes
// contend for the key.
//
// Notifications are only hints: the first waiter's wait is also bounded by
// the holder's remaining TTL (as the strategy reports it, see RetryAfter),
// so expiry is noticed at once, and by the maximum retry delay
// (WithRetryDelay), so a lost notification never parks the queue (on a
// contended key, by the back-off when that is longer); every
// waiter becomes the first within the time the others ahead of it take.
// Without notifications (the strategy or its nodes cannot notify) the first
// waiter polls with jittered exponential backoff between the bounds of
// WithRetryDelay, also capped by the holder's remaining TTL. Either way an
// Unlock through this Manager wakes the key's first waiter at once, and
// waiters of one Manager never race each other.

// queues holds a Manager's queues of waiting Lock calls, one per key.
type queues struct {
	m  *Manager
	mu sync.Mutex
	q  map[string]*queue
	// seen keeps, for contendedFor after a queue ended, what it knew of
	// other processes (contended, lastFence), for the key's next queue: a
	// queue ends whenever its last waiter leaves, which with two
	// goroutines taking turns is at every hand-off.
	seen    map[string]seenKey
	pruneAt int // prune seen when it grows to this many keys
}

// seenKey is what an ended queue knew of other processes.
type seenKey struct {
	ended     time.Time
	contended time.Time
	lastFence uint64
	slot      time.Duration
	fails     int
}

// A queue is the Lock calls of one Manager waiting for one key, in arrival
// order. It lives while it has waiters; its fields are guarded by the
// queues' mutex.
type queue struct {
	key     string
	waiters []*waiter     // in arrival order
	ready   chan struct{} // closed once the subscription attempt ended
	notify  bool          // release notifications are active
	stop    func()        // ends the subscription
	pending bool          // a release was announced while a waiter was trying
	expires time.Time     // when the holder's lease ends, as last reported

	heldHere bool // this Manager took the key while the queue lived, and has not released it since
	yielding bool // a run of hand-offs ended: until this Manager takes the key again, its waiters wake as on a contended key

	// Other processes contend for the key: a notified waiter lost the race
	// while this Manager did not hold the key, or this Manager's
	// acquisitions skipped fences. Until then, each
	// notification wakes the first waiter after a random delay, so that
	// subscription order (Redis notifies subscribers in a fixed order) does
	// not decide every race between processes.
	contended time.Time
	lastErr   error  // why this queue's last failed attempt failed
	lastFence uint64 // of this Manager's last acquisition while the queue lived
	// On a contended key each failed attempt is followed by a random
	// back-off (see wakeLaterLocked): slot is a decaying maximum of the
	// attempts' durations, fails counts the attempts refused while the key
	// is contended, and wakeAt is when the scheduled wake
	// fires (zero: none), which further notifications do not bring forward.
	slot   time.Duration
	fails  int
	wakeAt time.Time
}

// A waiter is one Lock call in a queue.
type waiter struct {
	wake     chan struct{} // buffered: a notification for this waiter
	trying   bool          // woken, or attempting
	notified bool          // woken by a notification
	handing  bool          // an Unlock is handing the lock to this waiter
	lock     *handedLock   // what the hand-off gave this waiter, not yet taken
}

// A handedLock is a lock an Unlock took for a waiter by a hand-off.
type handedLock struct {
	key   string
	token string
	start time.Time // of the Handoff call
	run   time.Time // when the run of hand-offs that brought it began
	lease Lease
}

// Cross-process fairness: how long contention is remembered, the least
// span of the random delay before a notification wakes the first waiter
// of a contended key, how many times the span doubles with failed
// attempts, and its cap in maximum retry delays.
const (
	contendedFor     = time.Second
	contendJitter    = 300 * time.Microsecond
	backoffDoublings = 5
	backoffCap       = 4
)

func (w *queues) init(m *Manager) {
	w.m = m
	w.q = map[string]*queue{}
	w.seen = map[string]seenKey{}
}

// queued reports whether calls wait for key.
func (w *queues) queued(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.q[key] != nil
}

// join appends a waiter to key's queue, creating the queue and its
// subscription when there is none. creator reports that this call made the
// queue; it closes q.ready when the subscription is active or has failed.
func (w *queues) join(ctx context.Context, key string) (q *queue, me *waiter, creator bool) {
	w.mu.Lock()
	q = w.q[key]
	if q == nil {
		creator = true
		q = &queue{key: key, ready: make(chan struct{})}
		if s, ok := w.seen[key]; ok {
			delete(w.seen, key)
			if time.Since(s.ended) < contendedFor {
				q.contended, q.lastFence, q.slot = s.contended, s.lastFence, s.slot
				if time.Now().Before(s.contended) {
					q.fails = s.fails
				}
			}
		}
		w.q[key] = q
	}
	me = &waiter{wake: make(chan struct{}, 1), trying: creator}
	q.waiters = append(q.waiters, me)
	w.mu.Unlock()
	if creator {
		// On failure (the nodes cannot notify, or a node error) this
		// queue polls for as long as it lives. Bounded by the poll
		// interval, so that an unreachable node delays the queue no more
		// than polling would.
		sctx, cancel := context.WithTimeout(ctx, w.m.o.retryMax)
		stop, err := w.m.s.WatchRelease(sctx, key, func() { w.released(q) })
		cancel()
		if err == nil {
			w.mu.Lock()
			q.notify, q.stop = true, stop
			w.mu.Unlock()
		}
		close(q.ready)
	}
	return q, me, creator
}

// leave removes me from q, passing on a notification it did not use, and
// ends the queue and its subscription when it was the last waiter.
func (w *queues) leave(q *queue, me *waiter, won *Lock) {
	w.mu.Lock()
	if i := slices.Index(q.waiters, me); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
	}
	if won != nil {
		q.pending = false // announced releases all came before this acquisition
	} else if h := me.lock; h != nil {
		// Handed the lock as ctx ended: give it back, and let the next
		// waiter try.
		me.lock = nil
		go w.giveBack(h)
	} else {
		select {
		case <-me.wake:
			w.wakeLocked(q)
		default:
		}
	}
	var stop func()
	if len(q.waiters) == 0 && w.q[q.key] == q {
		delete(w.q, q.key)
		stop = q.stop
		w.rememberLocked(q)
	}
	w.mu.Unlock()
	if stop != nil {
		go stop()
	}
}

// rememberLocked keeps what the ending queue q knew of other processes in
// w.seen, dropping what is older than contendedFor once seen has grown.
func (w *queues) rememberLocked(q *queue) {
	now := time.Now()
	if q.lastFence == 0 && !now.Before(q.contended) {
		return
	}
	if len(w.seen) >= w.pruneAt {
		for k, s := range w.seen {
			if now.Sub(s.ended) >= contendedFor {
				delete(w.seen, k)
			}
		}
		w.pruneAt = max(64, 2*len(w.seen))
	}
	w.seen[q.key] = seenKey{ended: now, contended: q.contended, lastFence: q.lastFence, slot: q.slot, fails: q.fails}
}

// acquired records an acquisition of key by this Manager (Lock or
// TryLock): when fences were skipped since the last one, other processes
// took the key in between.
func (w *queues) acquired(key string, fence uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[key]
	if q == nil {
		if s, ok := w.seen[key]; ok {
			if s.lastFence != 0 && fence != s.lastFence+1 {
				s.contended = time.Now().Add(contendedFor)
			}
			s.ended, s.lastFence = time.Now(), fence
			w.seen[key] = s
		}
		return
	}
	if q.lastFence != 0 && fence != q.lastFence+1 {
		q.contended = time.Now().Add(contendedFor)
	}
	q.lastFence = fence
	q.heldHere, q.yielding = true, false
}

// released is called when the key of q may have been released.
func (w *queues) released(q *queue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.q[q.key] != q {
		return
	}
	if q.yielding || time.Now().Before(q.contended) {
		w.wakeLaterLocked(q)
		return
	}
	w.wakeLocked(q)
}

// releasedHere is called when this Manager released key (or tried to):
// its first waiter tries at once, without waiting for the server's
// notification, which may not come (a strategy that cannot notify) or come
// late; after a run of hand-offs, with the delay of a contended key, so
// that other processes' waiters have their chance.
func (w *queues) releasedHere(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.q[key]; q != nil {
		q.heldHere = false
		if q.yielding {
			w.wakeLaterLocked(q)
		} else {
			w.wakeLocked(q)
		}
	}
}

// expiring is called when this Manager left key to expire at at
// (Lock.UnlockAt) instead of releasing it: nothing is handed off, and the
// key's first waiter, if any, is woken at at, as by a release here, rather
// than at its next poll.
func (w *queues) expiring(key string, at time.Time) {
	w.mu.Lock()
	q := w.q[key]
	w.mu.Unlock()
	if q != nil {
		time.AfterFunc(time.Until(at), func() { w.releasedHere(key) })
	}
}

// wakeLaterLocked wakes q's first waiter after a random delay of up to
// the span: the longest recent attempt (at least 300µs), doubled for each
// attempt refused while the key is contended (up to 32 times; not reset
// when this Manager takes the key, so that the processes' spans stay
// alike and the last winner does not keep winning), at most 4 maximum
// retry delays. A wake already scheduled is kept:
// the notifications that come meanwhile do not bring it forward.
func (w *queues) wakeLaterLocked(q *queue) {
	if q.wakeAt.After(time.Now()) {
		return // a wake is scheduled already
	}
	span := max(contendJitter, q.slot) << min(q.fails, backoffDoublings)
	d := rand.N(min(span, backoffCap*w.m.o.retryMax))
	q.wakeAt = time.Now().Add(d)
	time.AfterFunc(d, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		q.wakeAt = time.Time{}
		if w.q[q.key] == q {
			w.wakeLocked(q)
		}
	})
}

// wakeLocked wakes the first waiter, unless one is already trying: that
// one will try again (pending), so one release wakes one waiter.
func (w *queues) wakeLocked(q *queue) {
	for _, x := range q.waiters {
		if x.trying {
			q.pending = true
			return
		}
	}
	if len(q.waiters) > 0 {
		x := q.waiters[0]
		x.trying, x.notified = true, true
		select {
		case x.wake <- struct{}{}:
		default:
		}
	}
}

// handOff passes l's lock to the first waiter of its key, when there is
// one and the strategy is a Handoff (see the top of this file for when it does not). handed
// reports that it tried; err is then Unlock's error. When the hand-off
// fails, l's lock is released and the waiter woken, as Unlock would have.
func (w *queues) handOff(ctx context.Context, l *Lock) (err error, handed bool) {
	h, ok := w.m.s.(Handoff)
	if !ok {
		return nil, false
	}
	q, me, run := w.handingTo(l.key, l.handoffRun)
	if me == nil {
		return nil, false
	}
	token := w.m.newToken()
	start := time.Now()
	lease, err := h.Handoff(ctx, l.key, l.token, token, w.m.o.ttl)
	w.mu.Lock()
	me.handing = false
	if err == nil && slices.Contains(q.waiters, me) {
		me.lock = &handedLock{key: l.key, token: token, start: start, run: run, lease: lease}
		select {
		case me.wake <- struct{}{}:
		default:
		}
		w.mu.Unlock()
		return nil, true
	}
	me.trying = false
	w.mu.Unlock()
	if err == nil {
		// The waiter gave up meanwhile.
		go w.giveBack(&handedLock{key: l.key, token: token, start: start, lease: lease})
		return nil, true
	}
	rerr := w.m.s.Release(ctx, l.key, l.token)
	w.releasedHere(l.key)
	if errors.Is(rerr, ErrNotHeld) && !errors.Is(err, ErrNotHeld) {
		// The hand-off, not a lapsed lease, ended the lock, or may have:
		// say why the hand-off failed.
		rerr = fmt.Errorf("dlm: unlock of %q: hand-off to a waiter failed: %w", l.key, err)
	}
	return rerr, true
}

// handingTo picks the waiter of key that an Unlock of a lock brought by a
// run of hand-offs that began at run (zero: none) hands the lock to: the
// first, unless it is trying already, other processes contend for the key,
// or the run has lasted the maximum retry delay. The Unlock then releases
// the lock, and this Manager's waiters wake after the delay of a contended
// key, so that other processes' waiters, woken by the release's
// notification, race them on equal terms. The run is carried from lock to
// lock rather than kept in the queue, which ends whenever its last waiter
// is handed the lock. It returns when the run the hand-off continues
// began.
func (w *queues) handingTo(key string, run time.Time) (*queue, *waiter, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.q[key]
	if q == nil || len(q.waiters) == 0 {
		return nil, nil, run
	}
	now := time.Now()
	switch {
	case now.Before(q.contended):
		return nil, nil, run
	case run.IsZero():
		run = now
	case now.Sub(run) >= w.m.o.retryMax:
		q.yielding = true
		return nil, nil, run
	}
	me := q.waiters[0]
	if me.trying {
		return nil, nil, run
	}
	me.handing, me.trying = true, true
	return q, me, run
}

// handed returns the lock a hand-off gave me, if any, as a Lock.
func (w *queues) handed(q *queue, me *waiter, st *lockStats) *Lock {
	w.mu.Lock()
	h := me.lock
	me.lock = nil
	w.mu.Unlock()
	if h == nil {
		return nil
	}
	if st != nil {
		st.attempts++
		st.last = h.start
	}
	l := w.m.held(q.key, h.token, h.start, h.lease)
	l.handoffRun = h.run
	return l
}

// giveBack releases a lock a hand-off took for a waiter that gave up, and
// wakes the key's next waiter. It is bounded by the lock's TTL, after which
// nothing is left to release.
func (w *queues) giveBack(h *handedLock) {
	ctx, cancel := context.WithDeadline(context.Background(), h.start.Add(w.m.o.ttl))
	defer cancel()
	_ = w.m.s.Release(ctx, h.key, h.token) // on failure the lock runs out at its TTL
	w.releasedHere(h.key)
}

// refusal is the error a waiter of q gives up with: prev, its own most
// informative refusal, or when it made no attempt (the first waiter of its
// queue tries for all), the queue's last.
func (w *queues) refusal(q *queue, prev error) error {
	if prev != nil {
		return prev
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return q.lastErr
}

// timedOut is called when me's timer fires, and reports whether it is to
// try now. Only the first waiter tries on a timer (the safety net against a
// lost notification, how expiry is noticed, and the poll when there are no
// notifications); the others keep their places, so a timer never lets a
// later arrival jump the queue, and waiters of one Manager never compete
// with each other (with Redlock, such races split the votes so that nobody
// wins).
func (w *queues) timedOut(q *queue, me *waiter) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(q.waiters) > 0 && q.waiters[0] != me || me.handing {
		return false
	}
	me.trying = true
	return true
}

// tried records a failed attempt and reports whether to try again at once
// because a release was announced meanwhile.
func (w *queues) tried(q *queue, me *waiter, err error, took time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !timedOut(err) || q.lastErr == nil {
		q.lastErr = err
	}
	// Refused, or given up on (not an error a server replied): a sign of
	// other attempts, when processes contend.
	var re *ReplyError
	refused := !errors.As(err, &re)
	if refused {
		q.slot = max(took, q.slot-q.slot/8)
		q.fails++
	}
	if !time.Now().Before(q.contended) {
		q.fails = 0
	}
	if d, ok := RetryAfter(err); ok {
		q.expires = time.Now().Add(d)
		if me.notified && !q.heldHere {
			q.contended = time.Now().Add(contendedFor) // lost the race to another process
		}
	} else {
		q.expires = time.Time{}
	}
	again := q.pending
	q.pending = false
	me.trying, me.notified = again, false
	select {
	case <-me.wake: // woken during the attempt: that release came too late for it
		again, me.trying = true, true
	default:
	}
	if refused && time.Now().Before(q.contended) && !q.heldHere {
		// Other processes contend: not again at once, even when a release
		// was announced meanwhile (on Redlock, most announcements are other
		// processes' failed attempts undoing their partial grants), but
		// after a back-off. (Not after an error a server replied, such as
		// TRYAGAIN while a Cluster slot moves: no sign of other attempts.)
		me.trying = false
		w.wakeLaterLocked(q)
		return false
	}
	return again
}

// pause is how long me sleeps before trying again unless woken: the poll
// interval (the retry delay, doubling, when there are no notifications; the
// maximum retry delay when there are), capped by the holder's remaining TTL.
// Waiters further back in the queue wait a little longer past the TTL, so
// that an expiry does not make them all try at once. It is never shorter
// than a scheduled wake (a back-off).
func (w *queues) pause(q *queue, me *waiter, delay *time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	maxPoll := w.m.o.retryMax
	var d time.Duration
	if q.notify {
		d = maxPoll/2 + rand.N(maxPoll/2+1)
	} else {
		d = *delay/2 + rand.N(*delay/2+1)
		*delay = min(2**delay, maxPoll)
	}
	if !q.expires.IsZero() {
		pos := max(slices.Index(q.waiters, me), 0)
		rem := time.Until(q.expires) + time.Millisecond + time.Duration(pos)*time.Millisecond + rand.N(time.Millisecond)
		if rem > 0 {
			d = min(d, rem)
		}
		// Once the expiry has passed, the first waiter is trying or about
		// to: the others wait a poll interval, or until woken, instead of
		// looping on timers that fire at once until its attempt returns.
	}
	if u := time.Until(q.wakeAt); u > 0 {
		d = max(d, u) // the wake comes first: the timer is the safety net
	}
	return d
}
