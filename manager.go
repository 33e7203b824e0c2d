package dlm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of the Manager's options.
const (
	DefaultTTL           = 10 * time.Second
	DefaultRetryMinDelay = 5 * time.Millisecond
	DefaultRetryMaxDelay = 250 * time.Millisecond
)

// Bounds on what a lock may be: a longer key or TTL is an error matching
// ErrInvalid, from the Manager and from every strategy of this module.
const (
	MaxKeyLen = 1024           // bytes of a lock's key
	MaxTTL    = 24 * time.Hour // a lease's TTL; renew a lock held longer
)

// CheckKey returns an error matching ErrInvalid when key cannot name a
// lock: empty, or longer than MaxKeyLen.
func CheckKey(key string) error {
	switch {
	case key == "":
		return invalidf("empty key")
	case len(key) > MaxKeyLen:
		return invalidf("key of %d bytes is longer than MaxKeyLen (%d)", len(key), MaxKeyLen)
	}
	return nil
}

// An Option configures a Manager. Options with bad values make New fail.
type Option struct{ apply func(*options) error }

type options struct {
	ttl                time.Duration
	retryMin, retryMax time.Duration
	renewFraction      float64       // 0: no auto-renewal
	maxHold            time.Duration // with auto-renewal
	owner              string        // WithOwner
	observer           Observer      // WithObserver; nil: none
}

// WithTTL sets the lease length of every lock the Manager takes.
// The default is DefaultTTL (10s). The TTL must be positive and at most
// MaxTTL; a strategy refuses TTLs too short for its clock-drift margin.
func WithTTL(ttl time.Duration) Option {
	return Option{func(o *options) error {
		if ttl <= 0 || ttl > MaxTTL {
			return invalidf("WithTTL(%v): TTL must be positive and at most %v", ttl, MaxTTL)
		}
		o.ttl = ttl
		return nil
	}}
}

// WithRetryDelay bounds the pause between two attempts of Lock when it has
// to poll: the pause starts near min, doubles after each refusal up to max,
// is jittered, and is never longer than the holder's remaining TTL when the
// strategy reports it. When the strategy can watch releases, a
// waiter is woken by the release and max is only the safety net: no wait
// is longer than max, or than the holder's remaining TTL.
// The defaults are DefaultRetryMinDelay (5ms) and DefaultRetryMaxDelay (250ms).
func WithRetryDelay(min, max time.Duration) Option {
	return Option{func(o *options) error {
		if min <= 0 || max < min {
			return invalidf("WithRetryDelay(%v, %v): need 0 < min <= max", min, max)
		}
		o.retryMin, o.retryMax = min, max
		return nil
	}}
}

// A Manager takes locks through a Strategy. It is safe for concurrent use.
type Manager struct {
	s       Strategy
	o       options
	renewer *renewer // nil without auto-renewal
	waits   waits
}

// New returns a Manager over s.
func New(s Strategy, opts ...Option) (*Manager, error) {
	if s == nil {
		return nil, invalidf("New: nil Strategy")
	}
	m := &Manager{s: s, o: options{ttl: DefaultTTL, retryMin: DefaultRetryMinDelay, retryMax: DefaultRetryMaxDelay}}
	m.o.owner = processOwner()
	var errs []error
	for _, opt := range opts {
		if opt.apply == nil {
			errs = append(errs, invalidf("New: zero Option"))
			continue
		}
		if err := opt.apply(&m.o); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m.renewer = newRenewer(s, m.o)
	m.waits.init(m)
	return m, nil
}

// TTL returns the lease length of the Manager's locks.
func (m *Manager) TTL() time.Duration { return m.o.ttl }

// Strategy returns the strategy the Manager takes locks through. The
// primitives built on a Manager (packages semaphore, multilock, rwlock)
// watch releases through it.
func (m *Manager) Strategy() Strategy { return m.s }

// RetryDelay returns the bounds of the pause between attempts
// (WithRetryDelay).
func (m *Manager) RetryDelay() (min, max time.Duration) { return m.o.retryMin, m.o.retryMax }

// TryLock makes one attempt to take key. When another owner holds it, the
// error matches ErrNotAcquired (and HeldError with errors.As).
func (m *Manager) TryLock(ctx context.Context, key string) (*Lock, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if m.o.observer != nil {
		return m.observed(ctx, key, true)
	}
	return m.tryLock(ctx, key, nil)
}

// tryLock is TryLock after the key was checked; st, when not nil, counts
// the attempt for an Observer.
func (m *Manager) tryLock(ctx context.Context, key string, st *lockStats) (*Lock, error) {
	token := m.NewToken()
	start := time.Now()
	if st != nil {
		st.attempts, st.last = 1, start
	}
	lease, err := m.s.Acquire(ctx, key, token, m.o.ttl)
	if err != nil {
		return nil, withContext(ctx, err)
	}
	return m.held(key, token, start, lease), nil
}

// held wraps a granted lease in a Lock and starts renewing it if asked to.
func (m *Manager) held(key, token string, start time.Time, lease Lease) *Lock {
	l := newLock(m, key, token, start, lease)
	if m.o.observer != nil {
		l.Context() // its timer ends the lease, and reports Lost, when the validity runs out
	}
	m.renewer.add(l)
	m.waits.acquired(key, lease.Fence)
	return l
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
