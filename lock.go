package dlm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// A Lock is a held lease on a key. Its methods are safe for concurrent use.
type Lock struct {
	m     *Manager
	key   string
	token string
	base  time.Time // acquisition start, carrying a monotonic clock reading

	handoffRun time.Time // when the run of hand-offs that brought this lock began; zero when an attempt of its own took it

	// untilNs is lease.Until-base, and over (below) is set once the lease
	// ended: both let Context().Err() check the clock without taking mu.
	untilNs atomic.Int64

	mu     sync.Mutex
	lease  driver.Lease
	ended  error     // why the lease ended, once it has
	ctx    *leaseCtx // created by the first call to Context
	cancel context.CancelCauseFunc
	timer  *time.Timer // ends ctx when the lease runs out

	lastErr error // the last renewal's error, if it failed

	// The small fields last, together, so that a Lock fits a smaller
	// allocation size class: a Manager may hold a million.
	over     atomic.Bool
	hidx     int32 // index in the renewer's heap, while renewing and not inflight; guarded by the renewer's mutex
	released bool  // guarded by mu
	capped   bool  // renewals stopped at the maximum hold time; guarded by mu
	renewing bool  // registered with the renewer; guarded by the renewer's mutex
	inflight bool  // a renewal of this lock is under way; guarded by the renewer's mutex
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.key }

// Token returns the random token that identifies this holder on the servers.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token: strictly greater than that of every earlier
// acquisition of the key. Pass it with each write the lock protects and have
// the storage reject writes carrying a smaller fence than it has seen.
func (l *Lock) Fence() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease.Fence
}

// Until returns the local time after which the lease must not be trusted:
// the validity last confirmed by the servers. Renewals move it later.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease.Until
}

// Context returns a context that ends when the lease can no longer be
// trusted, never later than the validity last confirmed (Until):
//
//   - when that validity runs out (Err checks the monotonic clock on every
//     call, so it reports the end even before the timer that closes Done
//     has run);
//   - when a renewal or an Extend learns from the servers that the key was
//     deleted or now belongs to another owner;
//   - when auto-renewal fails until the validity runs out, or stops at the
//     maximum hold time;
//   - when Unlock or UnlockAt is called.
//
// context.Cause reports why: an error matching ErrLost (wrapping the
// renewal's error when there was one), or ErrUnlocked after Unlock or
// UnlockAt.
//
// Deadline reports the validity last confirmed, Until. Unlike most
// contexts, successive calls may report a later time after a renewal; a
// deadline read once (as by context.WithTimeout or a socket deadline) is
// therefore a safe, possibly early, bound on the lease.
func (l *Lock) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		inner, cancel := context.WithCancelCause(context.Background())
		l.ctx, l.cancel = &leaseCtx{Context: inner, l: l}, cancel
		if l.ended != nil {
			l.cancel(l.ended)
		} else {
			l.armLocked()
		}
	}
	return l.ctx
}

// leaseCtx is a cancel-cause context whose Err and Value (hence
// context.Cause) check the lease's validity against the clock first.
type leaseCtx struct {
	context.Context
	l *Lock
}

func (c *leaseCtx) Deadline() (time.Time, bool) { return c.l.Until(), true }
func (c *leaseCtx) Err() error                  { c.l.checkExpired(); return c.Context.Err() }
func (c *leaseCtx) Value(key any) any           { c.l.checkExpired(); return c.Context.Value(key) }
func (c *leaseCtx) String() string              { return "dlm.Lock(" + c.l.key + ").Context" }

// checkExpired ends the lease if its validity has run out. It must not be
// called with mu held.
func (l *Lock) checkExpired() {
	if l.over.Load() || time.Since(l.base) < time.Duration(l.untilNs.Load()) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expireLocked()
}

// expireLocked ends the lease when its validity has run out, and reports
// whether it has ended.
func (l *Lock) expireLocked() bool {
	if l.ended != nil {
		return true
	}
	if time.Now().Before(l.lease.Until) {
		return false
	}
	why := "validity ran out"
	switch {
	case l.capped:
		why = "maximum hold time reached, renewal stopped"
	case l.lastErr != nil:
		why = "validity ran out; last renewal failed: " + l.lastErr.Error()
	}
	l.endLocked(&lostError{key: l.key, why: why, until: l.lease.Until, err: l.lastErr, maxHold: l.capped})
	return true
}

// A lostError is the cause of a lease that ended without Unlock.
type lostError struct {
	key     string
	why     string
	until   time.Time
	err     error // the server's or renewal's error, if any
	maxHold bool  // the maximum hold time was reached: matches ErrMaxHold
}

func (e *lostError) Error() string {
	return fmt.Sprintf("dlm: lock lost: %q: %s (valid until %s)", e.key, e.why, e.until.Format(time.RFC3339Nano))
}
func (e *lostError) Is(target error) bool {
	return target == ErrLost || e.maxHold && target == ErrMaxHold
}
func (e *lostError) Unwrap() error { return e.err }

// armLocked (re)starts the timer that ends the context at the lease's end.
func (l *Lock) armLocked() {
	if l.ctx == nil || l.ended != nil {
		return
	}
	d := time.Until(l.lease.Until)
	if l.timer == nil {
		l.timer = time.AfterFunc(d, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if !l.expireLocked() {
				l.timer.Reset(time.Until(l.lease.Until)) // extended meanwhile
			}
		})
		return
	}
	l.timer.Reset(d)
}

// endLocked ends the lease, and its context if any, with cause. The first
// end that is not Unlock's is reported to the Observer as a loss.
func (l *Lock) endLocked(cause error) {
	if l.ended == nil {
		l.ended = cause
		if o := l.m.o.observer; o != nil && cause != ErrUnlocked {
			o.Lost(l.key, cause, l.heldForLocked(time.Now()))
		}
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.cancel != nil {
		l.cancel(l.ended)
	}
	// Only now: checkExpired skips the lock once it sees over, so the
	// context must already be cancelled by then.
	l.over.Store(true)
}

// setLeaseLocked adopts a lease from a successful extension, unless the old
// one has already run out: a lease that ended is never revived.
func (l *Lock) setLeaseLocked(lease driver.Lease) bool {
	if l.expireLocked() {
		return false
	}
	// A shorter extension shortens the lease too: the servers' TTL was
	// reset, so the old validity no longer holds.
	l.lease = lease
	l.untilNs.Store(int64(lease.Until.Sub(l.base)))
	l.armLocked()
	return true
}

// lostLocked ends the lease because the servers said it is no longer held.
func (l *Lock) lostLocked(err error) {
	l.endLocked(&lostError{key: l.key, why: "the servers no longer hold it for this token: " + err.Error(), until: l.lease.Until, err: err})
}

// Extend resets the lease to ttl from now. When the lock is no longer held
// the error matches ErrNotHeld and the Lock's context ends with ErrLost.
// Extending a lease that has already run out fails with ErrNotHeld even if
// the servers still had it: its context has ended and stays ended.
//
// With WithAutoRenew's maximum hold time, an extension is shortened to end
// at it, and refused once it has passed: the error matches ErrNotHeld and
// the context ends with ErrLost and ErrMaxHold as its lease would.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("Extend: TTL %v must be positive", ttl)
	}
	l.mu.Lock()
	released, ended := l.released, l.ended
	if maxHold := l.m.o.maxHold; ended == nil && !released && maxHold > 0 {
		left := maxHold - time.Since(l.base)
		if left <= 0 {
			l.capped = true
			l.endLocked(&lostError{key: l.key, why: "maximum hold time reached, extension refused", until: l.lease.Until, maxHold: true})
			ended = l.ended
		}
		ttl = min(ttl, left)
	}
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q was unlocked", ErrNotHeld, l.key)
	}
	if ended != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, ended)
	}
	lease, err := l.m.s.Extend(ctx, l.key, l.token, ttl)
	if o := l.m.o.observer; o != nil {
		o.Renewed(l.key, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			l.lostLocked(err)
		}
		return err
	}
	if !l.setLeaseLocked(lease) {
		return fmt.Errorf("%w: %w", ErrNotHeld, l.ended)
	}
	return nil
}

// Unlock releases the lock and ends its context with ErrUnlocked. When the
// lock had already expired or been taken by someone else the error matches
// ErrNotHeld. When Lock calls of the same Manager wait for the key and the
// strategy is a Handoff, the lock passes straight to the first of them
// (see Lock). When the release fails for another reason (a node error) the
// lock stays releasable and Unlock may be called again; the lease runs out at
// its TTL in any case. Use a context that is still live, such as
// context.WithoutCancel(ctx), when unlocking in a defer.
func (l *Lock) Unlock(ctx context.Context) error {
	return l.end(func() error {
		l.m.renewer.remove(l)
		return l.release(ctx)
	})
}

// end ends the lease with ErrUnlocked, then runs finish (what is done on
// the servers), and reports the end to the Observer: Unlock's and
// UnlockAt's shared frame. A lock already released is ErrNotHeld.
func (l *Lock) end(finish func() error) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already unlocked", ErrNotHeld, l.key)
	}
	o := l.m.o.observer
	var held time.Duration
	if o != nil {
		// The context would say the lease was lost if asked now; say
		// so to the Observer too, rather than that Unlock ended it.
		l.expireLocked()
		held = time.Since(l.base)
	}
	ending := l.ended == nil // this call ends the lease: report it
	l.endLocked(ErrUnlocked)
	l.mu.Unlock()
	err := finish()
	if o != nil && ending {
		o.Released(l.key, held, err)
	}
	return err
}

// release hands the lock off to a waiter or releases it (Unlock's work
// once the lease has ended), and records that it was released unless a
// node error left that undecided.
func (l *Lock) release(ctx context.Context) error {
	err, handed := l.m.queues.handOff(ctx, l)
	if !handed {
		err = l.m.s.Release(ctx, l.key, l.token)
	}
	l.settle(err)
	if !handed {
		l.m.queues.releasedHere(l.key)
	}
	return err
}

// settle records that the lock was released, or left to expire, unless
// err says a node error left that undecided.
func (l *Lock) settle(err error) {
	if err == nil || errors.Is(err, ErrNotHeld) {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
}

// UnlockAt ends the lock as Unlock does (its context ends with
// ErrUnlocked, renewal stops) but leaves the key held on the servers until
// at instead of deleting it: it sets the key's remaining TTL to
// time.Until(at), rounded up to the millisecond, through the strategy's
// Extend (Redlock's quorum and the failover strategy's wait for replicas
// included). Nobody, this Manager's waiting Lock calls included, takes the
// key before at; then it expires. A renewal under way is waited for first,
// so it cannot lengthen the TTL again; a concurrent Extend can. A later
// Unlock does nothing but return an error matching ErrNotHeld.
//
//   - An at that has passed makes UnlockAt an Unlock. With WithAutoRenew's
//     maximum hold time, at is moved back to it as Extend is.
//   - When time.Until(at) is too short for the strategy to take as a TTL
//     (below its drift margin; on a failover strategy, also its wait for
//     replicas), UnlockAt waits until at, within ctx, and then releases the
//     lock as Unlock does, rather than free the key early.
//   - An at more than MaxTTL away is an error matching ErrInvalid, and
//     changes nothing.
//   - When the lock was no longer held the error matches ErrNotHeld. When
//     the servers could not be told (a node error, too few
//     acknowledgements, a TTL above the strategy's WithMaxTTL), the lock
//     stays releasable, as after a failed Unlock: call UnlockAt or Unlock
//     again; meanwhile its key keeps the TTL it had.
//
// The servers expire the key by their own clocks, as they do every lease.
// A semaphore's permit is a Lock and has UnlockAt; see packages multilock
// and rwlock for theirs.
func (l *Lock) UnlockAt(ctx context.Context, at time.Time) error {
	if maxHold := l.m.o.maxHold; maxHold > 0 {
		if end := l.base.Add(maxHold); end.Before(at) {
			at = end
		}
	}
	d := time.Until(at)
	if d <= 0 {
		return l.Unlock(ctx)
	}
	if d > MaxTTL {
		return invalidf("UnlockAt: %v from now is beyond MaxTTL (%v)", d, MaxTTL)
	}
	return l.end(func() error {
		l.m.renewer.removeSettled(ctx, l)
		return l.expireAt(ctx, at)
	})
}

// expireAt is UnlockAt's work once the lease has ended and renewal
// stopped.
func (l *Lock) expireAt(ctx context.Context, at time.Time) error {
	ttl := time.Until(at)
	if ttl <= 0 {
		return l.release(ctx)
	}
	ttl = (ttl + time.Millisecond - 1).Truncate(time.Millisecond)
	_, err := l.m.s.Extend(ctx, l.key, l.token, ttl)
	if errors.Is(err, ErrInvalid) && ttl < l.m.o.ttl {
		// Too short for the strategy (which took the Manager's TTL):
		// release at at, not before.
		t := time.NewTimer(time.Until(at))
		defer t.Stop()
		select {
		case <-t.C:
			return l.release(ctx)
		case <-ctx.Done():
			return fmt.Errorf("dlm: UnlockAt of %q: waiting to release it at %v: %w", l.key, at.Format(time.RFC3339Nano), ctx.Err())
		}
	}
	l.settle(err)
	if err == nil {
		l.m.queues.expiring(l.key, at)
	}
	return err
}

// heldForLocked is how long l was held when its lease ended now: up to the end
// of its validity, or now if sooner. Called with l.mu held.
func (l *Lock) heldForLocked(now time.Time) time.Duration {
	end := l.lease.Until
	if now.Before(end) {
		end = now
	}
	return end.Sub(l.base)
}
