package dlm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlmgo/dlm/driver"
	"github.com/dlmgo/dlm/internal/mgr"
)

// Defaults of the Manager's options.
const (
	DefaultTTL           = 10 * time.Second
	defaultRetryMinDelay = 5 * time.Millisecond
	defaultRetryMaxDelay = 250 * time.Millisecond
)

// Bounds on what a lock may be: a longer key or TTL is an error matching
// ErrInvalid, from the Manager and from every strategy of this module.
const (
	MaxKeyLen   = 1024           // bytes of a lock's key
	MaxTTL      = 24 * time.Hour // a lease's TTL; renew a lock held longer
	MaxOwnerLen = 128            // bytes of WithOwner's owner
)

// checkKey returns an error matching ErrInvalid when key cannot name a
// lock: empty, or longer than MaxKeyLen.
func checkKey(key string) error {
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
// is longer than max, or than the holder's remaining TTL, except on a key
// other processes contend for, where each failed attempt is followed by a
// random back-off of up to 4×max.
// The defaults are 5ms and 250ms.
func WithRetryDelay(min, max time.Duration) Option {
	return Option{func(o *options) error {
		if min <= 0 || max < min {
			return invalidf("WithRetryDelay(%v, %v): need 0 < min <= max", min, max)
		}
		o.retryMin, o.retryMax = min, max
		return nil
	}}
}

// WithOwner names who takes the Manager's locks, so that an operator who
// finds a lock held (package inspect, `dlm inspect`) can tell which program
// holds it. The default is "PROGRAM@HOST:PID". The owner must be 1 to
// MaxOwnerLen bytes of UTF-8 text without control characters.
//
// The owner travels inside the lock's token, with the time the acquisition
// began and the lease's TTL: it is stored with the lock at no extra round
// trip, and goes when the lock is released or expires.
func WithOwner(owner string) Option {
	return Option{func(o *options) error {
		if err := checkOwner(owner); err != nil {
			return err
		}
		o.owner = owner
		return nil
	}}
}

func checkOwner(owner string) error {
	switch {
	case owner == "":
		return invalidf("WithOwner: empty owner")
	case len(owner) > MaxOwnerLen:
		return invalidf("WithOwner: owner of %d bytes is longer than MaxOwnerLen (%d)", len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return invalidf("WithOwner: owner %q is not UTF-8", owner)
	case strings.IndexFunc(owner, unicode.IsControl) >= 0:
		return invalidf("WithOwner: owner %q has a control character", owner)
	}
	return nil
}

// processOwner is the default owner: "PROGRAM@HOST:PID".
var processOwner = sync.OnceValue(func() string {
	prog := "go"
	if exe, err := os.Executable(); err == nil {
		prog = filepath.Base(exe)
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return FitOwner(fmt.Sprintf("%s@%s:%d", prog, host, os.Getpid()))
})

// FitOwner returns s made fit for WithOwner: invalid UTF-8 and control
// characters replaced by '?', cut to MaxOwnerLen bytes, "unknown" if empty.
// It is for owners made from what a program does not control, such as a
// command's name.
func FitOwner(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	for len(s) > MaxOwnerLen || !utf8.ValidString(s) {
		s = s[:min(len(s), MaxOwnerLen)-1]
	}
	if s == "" {
		s = "unknown"
	}
	return s
}

// A Manager takes locks through a Strategy. It is safe for concurrent use.
type Manager struct {
	s       driver.Strategy
	o       options
	renewer *renewer // nil without auto-renewal
	queues  *queues  // makes the attempts, and queues the Lock calls that wait
}

// New returns a Manager over s.
func New(s driver.Strategy, opts ...Option) (*Manager, error) {
	if s == nil {
		return nil, invalidf("New: nil Strategy")
	}
	m := &Manager{s: s, o: options{ttl: DefaultTTL, retryMin: defaultRetryMinDelay, retryMax: defaultRetryMaxDelay}}
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
	m.queues = newQueues(s, m.o, m.hold)
	return m, nil
}

// TTL returns the lease length of the Manager's locks.
func (m *Manager) TTL() time.Duration { return m.o.ttl }

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
// Lock calls of one Manager that wait for the same key queue up in arrival
// order and never race each other; a waiter is woken by the key's release
// notification where the strategy can watch releases, and polls within
// WithRetryDelay's bounds (and the holder's remaining TTL, see RetryAfter)
// otherwise. When this Manager unlocks a key its own Lock calls wait for
// and the strategy is a Handoff, the lock passes straight to the first of
// them. How the queue decides is described in queue.go.
func (m *Manager) Lock(ctx context.Context, key string) (*Lock, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if m.o.observer != nil {
		return m.observed(ctx, key, false)
	}
	return m.queues.acquire(ctx, key, nil)
}

// TryLock makes one attempt to take key. When another owner holds it, the
// error matches ErrNotAcquired, and RetryAfter may say for how long.
func (m *Manager) TryLock(ctx context.Context, key string) (*Lock, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if m.o.observer != nil {
		return m.observed(ctx, key, true)
	}
	return m.queues.try(ctx, key, nil)
}

// hold wraps a lease granted to token in a held Lock of m, and starts
// renewing it when m renews its locks: the Manager's part of every
// acquisition, given to its queues.
func (m *Manager) hold(key, token string, start time.Time, lease driver.Lease) *Lock {
	l := newLock(m, key, token, start, lease)
	if m.o.observer != nil {
		l.Context() // its timer ends the lease, and reports Lost, when the validity runs out
	}
	if m.renewer != nil { // nil unless WithAutoRenew
		m.renewer.add(l)
	}
	return l
}

// newLock returns the Lock of a lease granted to token at start.
func newLock(m *Manager, key, token string, start time.Time, lease driver.Lease) *Lock {
	l := &Lock{m: m, key: key, token: token, base: start, lease: lease}
	l.untilNs.Store(int64(lease.Until.Sub(start)))
	return l
}

// lockStats counts what an observed Lock or TryLock does.
type lockStats struct {
	attempts int
	last     time.Time // the start of the last attempt
}

// observed runs Lock (try false) or TryLock (try true) under the Manager's
// Observer.
func (m *Manager) observed(ctx context.Context, key string, try bool) (*Lock, error) {
	start := time.Now()
	ctx, done := m.o.observer.LockStart(ctx, key, try)
	var st lockStats
	var l *Lock
	var err error
	if try {
		l, err = m.queues.try(ctx, key, &st)
	} else {
		l, err = m.queues.acquire(ctx, key, &st)
	}
	d := LockDone{Attempts: st.attempts, Err: err}
	if st.attempts > 0 {
		d.Waited = st.last.Sub(start)
	}
	if l != nil {
		d.Fence = l.Fence()
	}
	done(d)
	return l, err
}

// init gives the lock family (package internal/mgr) what it needs of a
// Manager.
func init() {
	mgr.Of = func(m any) mgr.Manager {
		mm := m.(*Manager)
		return mgr.Manager{Strategy: mm.s, NewToken: mm.queues.newToken, RetryMin: mm.o.retryMin, RetryMax: mm.o.retryMax}
	}
	mgr.CheckKey = checkKey
}
