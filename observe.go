package dlm

import (
	"context"
	"time"
)

// An Observer is told what a Manager's locks do, for metrics, traces and
// logs: package dlmotel reports to OpenTelemetry and package dlmslog logs
// through log/slog. Set one with WithObserver; a Manager without one (the
// default) does no work and makes no allocation for it.
//
// Methods are called synchronously, from the goroutine doing the work:
// Lock's or Unlock's caller, the Manager's renewal goroutine, or whichever
// goroutine notices that a lease has ended (a timer, a call of the Lock's
// context's Err). Some are called with a Lock's internal state locked, so
// they must be fast, must not block, and must not call methods of the
// Manager or its Locks. They may be called concurrently.
//
// Every lock that LockStart's done reports acquired ends with exactly one
// call of Lost or Released for it.
type Observer interface {
	// LockStart is called when Lock or TryLock (try) begins, after the key
	// was checked. The attempts run with the context it returns, which must
	// be ctx or derived from it (a span started here is then the parent of
	// the strategy's and its nodes' work). done is called exactly once,
	// before Lock or TryLock returns, with the outcome.
	LockStart(ctx context.Context, key string, try bool) (context.Context, func(LockDone))
	// Renewed is called after each renewal of a held lock, by auto-renewal
	// (WithAutoRenew) or Lock.Extend, with its error: nil on success.
	Renewed(key string, err error)
	// Lost is called once when a lock's lease ended before Unlock was
	// called: a renewal or Extend found it no longer held, its validity ran
	// out, or the maximum hold time was reached. cause is its context's
	// cause: it matches ErrLost, and ErrNotHeld (refused), ErrRevoked
	// (revoked by an operator) or ErrMaxHold when that is why. held is how
	// long the lock was held, from the start of the attempt that took it to
	// the end of its lease, or until the end was found if that came first.
	//
	// With an Observer the Manager watches every lease's end with a timer
	// (as Lock.Context does), so that a lock that runs out while nobody
	// looks is reported when it does; an Unlock that finds the validity
	// run out before that timer ran reports Lost too (and the Lock's
	// context ends with ErrLost, as its Err would have said).
	Lost(key string, cause error, held time.Duration)
	// Released is called when the Unlock call that ended a lease returns,
	// with its error; held is the time from the start of the attempt that
	// took the lock to the Unlock call. A lease that had run out before
	// Unlock was called is reported by Lost instead, and a later Unlock of
	// the same lock (to retry a failed release) is not reported.
	Released(key string, held time.Duration, err error)
}

// LockDone is the outcome of one Lock or TryLock call, for an Observer.
type LockDone struct {
	// Fence is the acquired lock's fencing token; 0 when Err is set.
	Fence uint64
	// Attempts is how many times the strategy's Acquire was called, with a
	// hand-off to this call by an Unlock counted as one (see Lock): 0 when
	// the context ended before the first attempt.
	Attempts int
	// Waited is the time from the start of the call to the start of its
	// last attempt: the time spent waiting for the lock (next to nothing
	// when the first attempt was made at once and decided).
	Waited time.Duration
	// Err is the error Lock or TryLock returns; nil when the lock was
	// acquired.
	Err error
}

// WithObserver reports the Manager's lock events to o (see Observer).
// A nil o is no observer.
func WithObserver(o Observer) Option {
	return Option{func(opts *options) error {
		opts.observer = o
		return nil
	}}
}
