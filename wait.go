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

// Lock takes key, waiting while others hold it, until it succeeds or ctx
// ends. Failed attempts, including node failures, are retried; an error
// that waiting cannot cure (see Permanent: invalid arguments, a closed
// client, authentication, a key of another type, an endpoint without
// scripting) ends the wait at once. When ctx ends first the error matches
// ErrNotAcquired, ctx's error, and the most informative refusal seen: a
// holder's or the servers' refusal rather than a timeout that followed it
// (for a call that waited in the queue without an attempt of its own, the
// last refusal of the attempts made for the queue).
//
// Every attempt uses a token of its own, so a failed attempt's clean-up,
// however late it reaches a server, can never delete a later attempt's
// grant.
//
// How it waits: calls of one Manager that wait for the same key queue up
// in arrival order, and a new call joins the end of a queue instead of
// trying ahead of it. When the strategy can watch releases, the queue
// subscribes to the key's release notifications and each notification wakes
// the first waiter only, which then tries within one round trip of the
// release. Other processes' waiters each get their own notification; when
// other processes contend, the first waiter is woken after a random delay
// of up to 300µs or the time its last attempt took (at most the maximum
// retry delay), whichever is longer, so that the fixed order in which Redis
// notifies subscribers does not pick the same winner every time, and so
// that attempts over slow nodes (which split the votes when they overlap)
// follow each other.
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
// (WithRetryDelay), so a lost notification never parks the queue; every
// waiter becomes the first within the time the others ahead of it take.
// Without notifications (the strategy or its nodes cannot notify) the first
// waiter polls with jittered exponential backoff between the bounds of
// WithRetryDelay, also capped by the holder's remaining TTL. Either way an
// Unlock through this Manager wakes the key's first waiter at once, and
// waiters of one Manager never race each other.
func (m *Manager) Lock(ctx context.Context, key string) (*Lock, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if m.o.observer != nil {
		return m.observed(ctx, key, false)
	}
	return m.lock(ctx, key, nil)
}

// lock is Lock after the key was checked; st, when not nil, counts the
// attempts for an Observer.
func (m *Manager) lock(ctx context.Context, key string, st *lockStats) (*Lock, error) {
	var prev error // the most informative refusal not caused by ctx ending
	w := &m.waits
	if !w.queued(key) {
		if l, err, done := m.attempt(ctx, key, &prev, st); done {
			return l, err
		}
	}
	q, me, creator := w.join(ctx, key)
	var won *Lock
	defer func() { w.leave(q, me, won) }()
	select {
	case <-q.ready:
	case <-ctx.Done():
		return nil, m.giveUp(ctx, w.refusal(q, prev))
	}
	delay := m.o.retryMin
	try := creator // the creator tries once its subscription is active
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if won = w.handed(q, me, st); won != nil {
			return won, nil
		}
		if try {
			tryStart := time.Now()
			l, err, done := m.attempt(ctx, key, &prev, st)
			if done {
				won = l
				return l, err
			}
			if w.tried(q, me, err, time.Since(tryStart)) {
				continue // a release was announced during the attempt
			}
		}
		timer.Reset(w.pause(q, me, &delay)) // since Go 1.23 Reset drops a stale value
		select {
		case <-me.wake:
			try = true
		case <-timer.C:
			try = w.timedOut(q, me)
		case <-ctx.Done():
			if won = w.handed(q, me, st); won != nil {
				return won, nil // handed over before ctx ended
			}
			return nil, m.giveUp(ctx, w.refusal(q, prev))
		}
	}
}

// attempt makes one acquisition attempt with a new token. done reports
// that Lock must return (l, err): on success, on a permanent error, or when
// ctx has ended.
func (m *Manager) attempt(ctx context.Context, key string, prev *error, st *lockStats) (l *Lock, err error, done bool) {
	token := m.NewToken()
	start := time.Now()
	if st != nil {
		st.attempts++
		st.last = start
	}
	lease, err := m.s.Acquire(ctx, key, token, m.o.ttl)
	if err == nil {
		return m.held(key, token, start, lease), nil, true
	}
	if ctx.Err() != nil && *prev != nil && (errors.Is(err, ctx.Err()) || timedOut(err)) {
		err = *prev // say why the lock was busy, not only that time ran out
	}
	if Permanent(err) || ctx.Err() != nil {
		return nil, withContext(ctx, err), true
	}
	if *prev == nil || !timedOut(err) || timedOut(*prev) {
		*prev = err
	}
	return nil, err, false
}

// timedOut reports whether err says no more than that time ran out: a
// deadline or a network timeout, which tells less than a refusal.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}

// giveUp is Lock's error when ctx ends while waiting.
func (m *Manager) giveUp(ctx context.Context, prev error) error {
	if prev == nil {
		prev = ErrNotAcquired
	}
	return withContext(ctx, prev)
}

// waits holds a Manager's queues of waiting Lock calls, one per key.
type waits struct {
	m  *Manager
	mu sync.Mutex
	q  map[string]*waitQueue
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
}

type waitQueue struct {
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
	tookLast  time.Duration // how long this queue's last failed attempt took
	lastErr   error         // why this queue's last failed attempt failed
	lastFence uint64        // of this Manager's last acquisition while the queue lived
}

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

// Cross-process fairness: how long contention is remembered, and the
// largest random delay before a notification wakes the first waiter.
const (
	contendedFor  = time.Second
	contendJitter = 300 * time.Microsecond
)

func (w *waits) init(m *Manager) {
	w.m = m
	w.q = map[string]*waitQueue{}
	w.seen = map[string]seenKey{}
}

// queued reports whether calls wait for key.
func (w *waits) queued(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.q[key] != nil
}

// join appends a waiter to key's queue, creating the queue and its
// subscription when there is none. creator reports that this call made the
// queue; it closes q.ready when the subscription is active or has failed.
func (w *waits) join(ctx context.Context, key string) (q *waitQueue, me *waiter, creator bool) {
	w.mu.Lock()
	q = w.q[key]
	if q == nil {
		creator = true
		q = &waitQueue{key: key, ready: make(chan struct{})}
		if s, ok := w.seen[key]; ok {
			delete(w.seen, key)
			if time.Since(s.ended) < contendedFor {
				q.contended, q.lastFence = s.contended, s.lastFence
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
func (w *waits) leave(q *waitQueue, me *waiter, won *Lock) {
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
func (w *waits) rememberLocked(q *waitQueue) {
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
	w.seen[q.key] = seenKey{ended: now, contended: q.contended, lastFence: q.lastFence}
}

// acquired records an acquisition of key by this Manager (Lock or
// TryLock): when fences were skipped since the last one, other processes
// took the key in between.
func (w *waits) acquired(key string, fence uint64) {
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
func (w *waits) released(q *waitQueue) {
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
func (w *waits) releasedHere(key string) {
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

// wakeLaterLocked wakes q's first waiter after a random delay of up to
// 300µs, or up to the time its last attempt took when that is longer (at
// most the maximum retry delay).
func (w *waits) wakeLaterLocked(q *waitQueue) {
	time.AfterFunc(rand.N(max(contendJitter, min(q.tookLast, w.m.o.retryMax))), func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.q[q.key] == q {
			w.wakeLocked(q)
		}
	})
}

// wakeLocked wakes the first waiter, unless one is already trying: that
// one will try again (pending), so one release wakes one waiter.
func (w *waits) wakeLocked(q *waitQueue) {
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
// one and the strategy is a Handoff (see Lock for when it does not). handed
// reports that it tried; err is then Unlock's error. When the hand-off
// fails, l's lock is released and the waiter woken, as Unlock would have.
func (w *waits) handOff(ctx context.Context, l *Lock) (err error, handed bool) {
	h, ok := w.m.s.(Handoff)
	if !ok {
		return nil, false
	}
	q, me, run := w.handingTo(l.key, l.handoffRun)
	if me == nil {
		return nil, false
	}
	token := w.m.NewToken()
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
func (w *waits) handingTo(key string, run time.Time) (*waitQueue, *waiter, time.Time) {
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
func (w *waits) handed(q *waitQueue, me *waiter, st *lockStats) *Lock {
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
func (w *waits) giveBack(h *handedLock) {
	ctx, cancel := context.WithDeadline(context.Background(), h.start.Add(w.m.o.ttl))
	defer cancel()
	_ = w.m.s.Release(ctx, h.key, h.token) // on failure the lock runs out at its TTL
	w.releasedHere(h.key)
}

// refusal is the error a waiter of q gives up with: prev, its own most
// informative refusal, or when it made no attempt (the first waiter of its
// queue tries for all), the queue's last.
func (w *waits) refusal(q *waitQueue, prev error) error {
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
func (w *waits) timedOut(q *waitQueue, me *waiter) bool {
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
func (w *waits) tried(q *waitQueue, me *waiter, err error, took time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	q.tookLast = took
	if !timedOut(err) || q.lastErr == nil {
		q.lastErr = err
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
	return again
}

// pause is how long me sleeps before trying again unless woken: the poll
// interval (the retry delay, doubling, when there are no notifications; the
// maximum retry delay when there are), capped by the holder's remaining TTL.
// Waiters further back in the queue wait a little longer past the TTL, so
// that an expiry does not make them all try at once.
func (w *waits) pause(q *waitQueue, me *waiter, delay *time.Duration) time.Duration {
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
		d = max(min(d, rem), 0)
	}
	return d
}
