package dlm

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/dlmgo/dlm/driver"
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

// queues takes a Manager's locks: it makes each attempt, and keeps the
// queues of Lock calls waiting for a key, one per key, whose wait loop it
// runs (acquire). It is given what it needs when it is made (newQueues)
// and knows nothing else of the Manager.
type queues struct {
	s        driver.Strategy
	handoff  driver.Handoff // s, when it can hand a lock off; nil otherwise
	owner    string         // carried by every token (WithOwner)
	ttl      time.Duration
	retryMin time.Duration
	retryMax time.Duration
	// hold wraps a lease granted to token in a held Lock (and starts
	// renewing it): the Manager's part of every acquisition.
	hold func(key, token string, start time.Time, lease driver.Lease) *Lock

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
	lease driver.Lease
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

// newQueues returns the queues of a Manager that takes locks through s
// with the options o, and makes each granted lease a Lock with hold.
func newQueues(s driver.Strategy, o options, hold func(key, token string, start time.Time, lease driver.Lease) *Lock) *queues {
	h, _ := s.(driver.Handoff)
	return &queues{
		s: s, handoff: h, owner: o.owner, ttl: o.ttl, retryMin: o.retryMin, retryMax: o.retryMax, hold: hold,
		q: map[string]*queue{}, seen: map[string]seenKey{},
	}
}

// newToken returns a new token for an acquisition beginning now: 20
// random bytes, hex-encoded, then ".<unix milliseconds>.<TTL in
// milliseconds>.<owner>". Strategies treat tokens as opaque; inspect.HolderOf
// reads who holds a lock from them (internal/token.Parse). Built on the
// stack when the owner fits (MaxOwnerLen does), so that the string is the
// one allocation.
func (qs *queues) newToken() string {
	var b [20]byte
	_, _ = crand.Read(b[:]) // never fails; see crypto/rand.Read
	var stack [40 + 3 + 2*20 + MaxOwnerLen]byte
	hex.Encode(stack[:40], b[:])
	buf := stack[:40]
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, time.Now().UnixMilli(), 10)
	buf = append(buf, '.')
	buf = strconv.AppendInt(buf, qs.ttl.Milliseconds(), 10)
	buf = append(buf, '.')
	buf = append(buf, qs.owner...)
	return string(buf)
}

// acquire is Lock after the key was checked: it takes key at once when no
// call of this Manager waits for it, and otherwise, or when that attempt
// is refused, waits its turn in key's queue (wait). st, when not nil,
// counts the attempts for an Observer.
func (qs *queues) acquire(ctx context.Context, key string, st *lockStats) (*Lock, error) {
	var prev error // the most informative refusal not caused by ctx ending
	if !qs.queued(key) {
		if l, err, done := qs.attempt(ctx, key, &prev, st); done {
			return l, err
		}
	}
	return qs.wait(ctx, key, &prev, st)
}

// try is TryLock after the key was checked: one attempt, whose error
// matches ErrNotAcquired and ctx's error when ctx has ended.
func (qs *queues) try(ctx context.Context, key string, st *lockStats) (*Lock, error) {
	var prev error
	l, err, _ := qs.attempt(ctx, key, &prev, st)
	return l, err
}

// wait joins key's queue and stays in it until its call holds the lock, by
// an attempt of its own or a hand-off, or ctx ends. prev is the most
// informative refusal seen so far; wait updates it.
func (qs *queues) wait(ctx context.Context, key string, prev *error, st *lockStats) (*Lock, error) {
	q, me, creator := qs.join(ctx, key)
	var won *Lock
	defer func() { qs.leave(q, me, won) }()
	select {
	case <-q.ready:
	case <-ctx.Done():
		return nil, giveUp(ctx, qs.refusal(q, *prev))
	}
	delay := qs.retryMin
	try := creator // the creator tries once its subscription is active
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if won = qs.handed(q, me, st); won != nil {
			return won, nil
		}
		if try {
			tryStart := time.Now()
			l, err, done := qs.attempt(ctx, key, prev, st)
			if done {
				won = l
				return l, err
			}
			if qs.tried(q, me, err, time.Since(tryStart)) {
				continue // a release was announced during the attempt
			}
		}
		timer.Reset(qs.pause(q, me, &delay)) // since Go 1.23 Reset drops a stale value
		select {
		case <-me.wake:
			try = true
		case <-timer.C:
			try = qs.timedOut(q, me)
		case <-ctx.Done():
			if won = qs.handed(q, me, st); won != nil {
				return won, nil // handed over before ctx ended
			}
			return nil, giveUp(ctx, qs.refusal(q, *prev))
		}
	}
}

// attempt makes one acquisition attempt with a new token, and records a
// success in key's queue (acquired). done reports that Lock must return
// (l, err): on success, on a permanent error, or when ctx has ended.
func (qs *queues) attempt(ctx context.Context, key string, prev *error, st *lockStats) (l *Lock, err error, done bool) {
	tok := qs.newToken()
	start := time.Now()
	if st != nil {
		st.attempts++
		st.last = start
	}
	lease, err := qs.s.Acquire(ctx, key, tok, qs.ttl)
	if err == nil {
		l = qs.hold(key, tok, start, lease)
		qs.acquired(key, lease.Fence)
		return l, nil, true
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
func giveUp(ctx context.Context, prev error) error {
	if prev == nil {
		prev = ErrNotAcquired
	}
	return withContext(ctx, prev)
}

// withContext joins err with ctx's cause when ctx has ended, so the result
// matches ErrNotAcquired, the context's error and err.
func withContext(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, ctx.Err()) {
		cause = errors.Join(ctx.Err(), cause)
	}
	if errors.Is(err, cause) {
		cause = nil
	}
	if !errors.Is(err, ErrNotAcquired) {
		err = fmt.Errorf("%w: %w", ErrNotAcquired, err)
	}
	return errors.Join(err, cause)
}

// queued reports whether calls wait for key.
func (qs *queues) queued(key string) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return qs.q[key] != nil
}

// join appends a waiter to key's queue, creating the queue and its
// subscription when there is none. creator reports that this call made the
// queue; it closes q.ready when the subscription is active or has failed.
func (qs *queues) join(ctx context.Context, key string) (q *queue, me *waiter, creator bool) {
	qs.mu.Lock()
	q = qs.q[key]
	if q == nil {
		creator = true
		q = &queue{key: key, ready: make(chan struct{})}
		if s, ok := qs.seen[key]; ok {
			delete(qs.seen, key)
			if time.Since(s.ended) < contendedFor {
				q.contended, q.lastFence, q.slot = s.contended, s.lastFence, s.slot
				if time.Now().Before(s.contended) {
					q.fails = s.fails
				}
			}
		}
		qs.q[key] = q
	}
	me = &waiter{wake: make(chan struct{}, 1), trying: creator}
	q.waiters = append(q.waiters, me)
	qs.mu.Unlock()
	if creator {
		// On failure (the nodes cannot notify, or a node error) this
		// queue polls for as long as it lives. Bounded by the poll
		// interval, so that an unreachable node delays the queue no more
		// than polling would.
		sctx, cancel := context.WithTimeout(ctx, qs.retryMax)
		stop, err := qs.s.WatchRelease(sctx, key, func() { qs.released(q) })
		cancel()
		if err == nil {
			qs.mu.Lock()
			q.notify, q.stop = true, stop
			qs.mu.Unlock()
		}
		close(q.ready)
	}
	return q, me, creator
}

// leave removes me from q, passing on a notification it did not use, and
// ends the queue and its subscription when it was the last waiter.
func (qs *queues) leave(q *queue, me *waiter, won *Lock) {
	qs.mu.Lock()
	if i := slices.Index(q.waiters, me); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
	}
	if won != nil {
		q.pending = false // announced releases all came before this acquisition
	} else if h := me.lock; h != nil {
		// Handed the lock as ctx ended: give it back, and let the next
		// waiter try.
		me.lock = nil
		go qs.giveBack(h)
	} else {
		select {
		case <-me.wake:
			qs.wakeLocked(q)
		default:
		}
	}
	var stop func()
	if len(q.waiters) == 0 && qs.q[q.key] == q {
		delete(qs.q, q.key)
		stop = q.stop
		qs.rememberLocked(q)
	}
	qs.mu.Unlock()
	if stop != nil {
		go stop()
	}
}

// rememberLocked keeps what the ending queue q knew of other processes in
// qs.seen, dropping what is older than contendedFor once seen has grown.
func (qs *queues) rememberLocked(q *queue) {
	now := time.Now()
	if q.lastFence == 0 && !now.Before(q.contended) {
		return
	}
	if len(qs.seen) >= qs.pruneAt {
		for k, s := range qs.seen {
			if now.Sub(s.ended) >= contendedFor {
				delete(qs.seen, k)
			}
		}
		qs.pruneAt = max(64, 2*len(qs.seen))
	}
	qs.seen[q.key] = seenKey{ended: now, contended: q.contended, lastFence: q.lastFence, slot: q.slot, fails: q.fails}
}

// acquired records an acquisition of key by this Manager (Lock or
// TryLock): when fences were skipped since the last one, other processes
// took the key in between.
func (qs *queues) acquired(key string, fence uint64) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.q[key]
	if q == nil {
		if s, ok := qs.seen[key]; ok {
			if s.lastFence != 0 && fence != s.lastFence+1 {
				s.contended = time.Now().Add(contendedFor)
			}
			s.ended, s.lastFence = time.Now(), fence
			qs.seen[key] = s
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
func (qs *queues) released(q *queue) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.q[q.key] != q {
		return
	}
	if q.yielding || time.Now().Before(q.contended) {
		qs.wakeLaterLocked(q)
		return
	}
	qs.wakeLocked(q)
}

// releasedHere is called when this Manager released key (or tried to):
// its first waiter tries at once, without waiting for the server's
// notification, which may not come (a strategy that cannot notify) or come
// late; after a run of hand-offs, with the delay of a contended key, so
// that other processes' waiters have their chance.
func (qs *queues) releasedHere(key string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.q[key]; q != nil {
		q.heldHere = false
		if q.yielding {
			qs.wakeLaterLocked(q)
		} else {
			qs.wakeLocked(q)
		}
	}
}

// expiring is called when this Manager left key to expire at at
// (Lock.UnlockAt) instead of releasing it: nothing is handed off, and the
// key's first waiter, if any, is woken at at, as by a release here, rather
// than at its next poll.
func (qs *queues) expiring(key string, at time.Time) {
	qs.mu.Lock()
	q := qs.q[key]
	qs.mu.Unlock()
	if q != nil {
		time.AfterFunc(time.Until(at), func() { qs.releasedHere(key) })
	}
}

// wakeLaterLocked wakes q's first waiter after a random delay of up to
// the span: the longest recent attempt (at least 300µs), doubled for each
// attempt refused while the key is contended (up to 32 times; not reset
// when this Manager takes the key, so that the processes' spans stay
// alike and the last winner does not keep winning), at most 4 maximum
// retry delays. A wake already scheduled is kept:
// the notifications that come meanwhile do not bring it forward.
func (qs *queues) wakeLaterLocked(q *queue) {
	if q.wakeAt.After(time.Now()) {
		return // a wake is scheduled already
	}
	span := max(contendJitter, q.slot) << min(q.fails, backoffDoublings)
	d := rand.N(min(span, backoffCap*qs.retryMax))
	q.wakeAt = time.Now().Add(d)
	time.AfterFunc(d, func() {
		qs.mu.Lock()
		defer qs.mu.Unlock()
		q.wakeAt = time.Time{}
		if qs.q[q.key] == q {
			qs.wakeLocked(q)
		}
	})
}

// wakeLocked wakes the first waiter, unless one is already trying: that
// one will try again (pending), so one release wakes one waiter.
func (qs *queues) wakeLocked(q *queue) {
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
func (qs *queues) handOff(ctx context.Context, l *Lock) (err error, handed bool) {
	h := qs.handoff
	if h == nil {
		return nil, false
	}
	q, me, run := qs.handingTo(l.key, l.handoffRun)
	if me == nil {
		return nil, false
	}
	tok := qs.newToken()
	start := time.Now()
	lease, err := h.Handoff(ctx, l.key, l.token, tok, qs.ttl)
	qs.mu.Lock()
	me.handing = false
	if err == nil && slices.Contains(q.waiters, me) {
		me.lock = &handedLock{key: l.key, token: tok, start: start, run: run, lease: lease}
		select {
		case me.wake <- struct{}{}:
		default:
		}
		qs.mu.Unlock()
		return nil, true
	}
	me.trying = false
	qs.mu.Unlock()
	if err == nil {
		// The waiter gave up meanwhile.
		go qs.giveBack(&handedLock{key: l.key, token: tok, start: start, lease: lease})
		return nil, true
	}
	rerr := qs.s.Release(ctx, l.key, l.token)
	qs.releasedHere(l.key)
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
func (qs *queues) handingTo(key string, run time.Time) (*queue, *waiter, time.Time) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.q[key]
	if q == nil || len(q.waiters) == 0 {
		return nil, nil, run
	}
	now := time.Now()
	switch {
	case now.Before(q.contended):
		return nil, nil, run
	case run.IsZero():
		run = now
	case now.Sub(run) >= qs.retryMax:
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
func (qs *queues) handed(q *queue, me *waiter, st *lockStats) *Lock {
	qs.mu.Lock()
	h := me.lock
	me.lock = nil
	qs.mu.Unlock()
	if h == nil {
		return nil
	}
	if st != nil {
		st.attempts++
		st.last = h.start
	}
	l := qs.hold(q.key, h.token, h.start, h.lease)
	l.handoffRun = h.run
	qs.acquired(q.key, h.lease.Fence)
	return l
}

// giveBack releases a lock a hand-off took for a waiter that gave up, and
// wakes the key's next waiter. It is bounded by the lock's TTL, after which
// nothing is left to release.
func (qs *queues) giveBack(h *handedLock) {
	ctx, cancel := context.WithDeadline(context.Background(), h.start.Add(qs.ttl))
	defer cancel()
	_ = qs.s.Release(ctx, h.key, h.token) // on failure the lock runs out at its TTL
	qs.releasedHere(h.key)
}

// refusal is the error a waiter of q gives up with: prev, its own most
// informative refusal, or when it made no attempt (the first waiter of its
// queue tries for all), the queue's last.
func (qs *queues) refusal(q *queue, prev error) error {
	if prev != nil {
		return prev
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return q.lastErr
}

// timedOut is called when me's timer fires, and reports whether it is to
// try now. Only the first waiter tries on a timer (the safety net against a
// lost notification, how expiry is noticed, and the poll when there are no
// notifications); the others keep their places, so a timer never lets a
// later arrival jump the queue, and waiters of one Manager never compete
// with each other (with Redlock, such races split the votes so that nobody
// wins).
func (qs *queues) timedOut(q *queue, me *waiter) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if len(q.waiters) > 0 && q.waiters[0] != me || me.handing {
		return false
	}
	me.trying = true
	return true
}

// tried records a failed attempt and reports whether to try again at once
// because a release was announced meanwhile.
func (qs *queues) tried(q *queue, me *waiter, err error, took time.Duration) bool {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if !timedOut(err) || q.lastErr == nil {
		q.lastErr = err
	}
	// Refused, or given up on (not an error a server replied): a sign of
	// other attempts, when processes contend.
	var re *driver.ReplyError
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
		qs.wakeLaterLocked(q)
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
func (qs *queues) pause(q *queue, me *waiter, delay *time.Duration) time.Duration {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	maxPoll := qs.retryMax
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
