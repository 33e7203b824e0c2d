package dlm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A Lock is a held lease on a key. Its methods are safe for concurrent use.
type Lock struct {
	m     *Manager
	key   string
	token string

	mu       sync.Mutex
	lease    Lease
	released bool
	ended    error           // why the lease ended, once it has
	ctx      context.Context // created by the first call to Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer // ends ctx when the lease runs out
}

func newLock(m *Manager, key, token string, lease Lease) *Lock {
	return &Lock{m: m, key: key, token: token, lease: lease}
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

// Until returns the local time after which the lease must not be trusted.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lease.Until
}

// Context returns a context that ends when the lease can no longer be
// trusted: when its validity runs out, when an extension finds the lock held
// by someone else, or when Unlock is called. context.Cause reports why: an
// error matching ErrLost, or ErrUnlocked after Unlock. The context reports no
// Deadline because extensions move the end of the lease; Until reports it.
func (l *Lock) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		if l.ended != nil {
			l.cancel(l.ended)
		} else {
			l.armLocked()
		}
	}
	return l.ctx
}

// armLocked (re)starts the timer that ends the context at the lease's end.
func (l *Lock) armLocked() {
	until := l.lease.Until
	d := time.Until(until)
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = time.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lease.Until.Equal(until) {
			l.endLocked(fmt.Errorf("%w: lease on %q ran out at %s", ErrLost, l.key, until.Format(time.RFC3339Nano)))
		}
	})
}

// endLocked ends the context, if any, with cause.
func (l *Lock) endLocked(cause error) {
	if l.ended == nil {
		l.ended = cause
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	if l.cancel != nil {
		l.cancel(cause)
	}
}

// Extend resets the lease to ttl from now. When the lock is no longer held
// the error matches ErrNotHeld and the Lock's context ends with ErrLost.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		return invalidf("Extend: TTL %v must be positive", ttl)
	}
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: %q was unlocked", ErrNotHeld, l.key)
	}
	lease, err := l.m.s.Extend(ctx, l.key, l.token, ttl)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrNotHeld) {
			l.endLocked(fmt.Errorf("%w: %w", ErrLost, err))
		}
		return err
	}
	l.lease = lease
	if l.ctx != nil && l.ended == nil {
		l.armLocked()
	}
	return nil
}

// Unlock releases the lock and ends its context with ErrUnlocked. When the
// lock had already expired or been taken by someone else the error matches
// ErrNotHeld. When the release fails for another reason (a node error) the
// lock stays releasable and Unlock may be called again; the lease runs out at
// its TTL in any case. Use a context that is still live, such as
// context.WithoutCancel(ctx), when unlocking in a defer.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q was already unlocked", ErrNotHeld, l.key)
	}
	l.endLocked(ErrUnlocked)
	l.mu.Unlock()
	err := l.m.s.Release(ctx, l.key, l.token)
	if err == nil || errors.Is(err, ErrNotHeld) {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	return err
}
