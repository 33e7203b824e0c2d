// Package multilock takes a set of keys all or none, through any
// driver.Strategy.
//
// A Set is one *dlm.Lock per key, taken through a dlm.Manager in one
// global order (the keys sorted bytewise), so that two callers locking
// overlapping sets, in whatever order they name the keys, never wait for
// each other in a cycle: no deadlock. Each key keeps its own lease, renewal
// and fence; the Set's Context ends when any of them can no longer be
// trusted.
//
// Cost: one acquisition per key, one after the other (a round trip each),
// and one release per key, all at once. While Lock waits for a key it
// holds the keys before it; their leases must outlive the wait, so use a
// Manager with dlm.WithAutoRenew when waits can be long. A held key whose
// lease ends during the wait is not lost silently: Lock gives back every
// key and starts over.
package multilock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlmgo/dlm"

	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/giveback"
	"github.com/dlmgo/dlm/internal/mgr"
)

// A Set is a group of keys held together. Its methods are safe for
// concurrent use.
type Set struct {
	locks  []*dlm.Lock // in key order
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// MaxKeys bounds the keys of one Set.
const MaxKeys = 1024

// keysOf returns the keys sorted and without repeats, or an error matching
// dlm.ErrInvalid.
func keysOf(keys []string) ([]string, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return nil, fmt.Errorf("%w: multilock: %d keys, need 1 to %d", dlm.ErrInvalid, len(keys), MaxKeys)
	}
	for _, k := range keys {
		if err := mgr.CheckKey(k); err != nil {
			return nil, errs.Within("multilock", err)
		}
	}
	return slices.Compact(slices.Sorted(slices.Values(keys))), nil
}

// TryLock makes one attempt to take every key: when one is held by another
// owner, it gives back those it took and returns an error matching
// dlm.ErrNotAcquired. Repeated keys count once.
func TryLock(ctx context.Context, m *dlm.Manager, keys ...string) (*Set, error) {
	return lock(ctx, m, keys, (*dlm.Manager).TryLock)
}

// Lock takes every key, waiting while others hold any of them, until it has
// them all or ctx ends (then it holds none, and the error matches
// dlm.ErrNotAcquired and ctx's error). Keys it took are given back before
// it returns an error (for at most the Manager's TTL; the error says when a
// release failed). Repeated keys count once. Keys are
// taken in sorted order, one at a time, each with dlm.Manager.Lock's
// waiting and retries.
func Lock(ctx context.Context, m *dlm.Manager, keys ...string) (*Set, error) {
	return lock(ctx, m, keys, (*dlm.Manager).Lock)
}

func lock(ctx context.Context, m *dlm.Manager, keys []string, take func(*dlm.Manager, context.Context, string) (*dlm.Lock, error)) (*Set, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: multilock: nil Manager", dlm.ErrInvalid)
	}
	keys, err := keysOf(keys)
	if err != nil {
		return nil, err
	}
	for {
		held, err := takeInOrder(ctx, m, keys, take)
		if err == nil {
			return newSet(held), nil
		}
		if !errors.Is(err, errHeldLost) {
			return nil, err
		}
	}
}

// errHeldLost reports that a key already taken lost its lease while a later
// one was awaited.
var errHeldLost = errors.New("dlm: multilock: a held key's lease ended during the wait")

// takeInOrder takes keys in order. While it waits for a key, it watches the
// keys it holds: when one of their leases ends it stops waiting, gives
// every key back and returns errHeldLost.
func takeInOrder(ctx context.Context, m *dlm.Manager, keys []string, take func(*dlm.Manager, context.Context, string) (*dlm.Lock, error)) ([]*dlm.Lock, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	held := make([]*dlm.Lock, 0, len(keys))
	for _, key := range keys {
		l, err := take(m, wctx, key)
		if err != nil {
			// Decided before giving back: the releases end the held
			// keys' contexts, which cancels wctx with errHeldLost.
			lost := context.Cause(wctx) == errHeldLost && ctx.Err() == nil
			back := giveback.Locks(ctx, m.TTL(), held...)
			if lost {
				return nil, errHeldLost
			}
			return nil, giveback.Wrap(errs.Within(fmt.Sprintf("multilock: %q", key), err), back)
		}
		held = append(held, l)
		context.AfterFunc(l.Context(), func() { cancel(errHeldLost) })
	}
	for _, l := range held {
		if l.Context().Err() != nil { // ended after its key was taken
			_ = giveback.Locks(ctx, m.TTL(), held...)
			return nil, errHeldLost
		}
	}
	return held, nil
}

// Of returns a Set of locks already held, in the order given, so that
// primitives built from several locks (package rwlock) share the Set's
// Context, Until and Unlock. It panics when locks is empty.
func Of(locks ...*dlm.Lock) *Set {
	if len(locks) == 0 {
		panic("multilock.Of: no locks")
	}
	return newSet(slices.Clone(locks))
}

func newSet(locks []*dlm.Lock) *Set {
	inner, cancel := context.WithCancelCause(context.Background())
	s := &Set{locks: locks, cancel: cancel}
	s.ctx = &setCtx{Context: inner, s: s}
	for _, l := range locks {
		lctx := l.Context()
		context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	}
	return s
}

// Keys returns the keys of the Set, in the order of Locks.
func (s *Set) Keys() []string {
	keys := make([]string, len(s.locks))
	for i, l := range s.locks {
		keys[i] = l.Key()
	}
	return keys
}

// Locks returns the Set's locks, one per key, each with its own fence and
// lease: in key order for a Set from Lock or TryLock, in the order given
// for one from Of.
func (s *Set) Locks() []*dlm.Lock { return slices.Clone(s.locks) }

// Fence returns the fencing token of key, or 0 when the Set does not hold
// key. Each key has its own fence; pass each with the writes its key
// protects.
func (s *Set) Fence(key string) uint64 {
	for _, l := range s.locks {
		if l.Key() == key {
			return l.Fence()
		}
	}
	return 0
}

// Until returns the earliest validity of the Set's locks: the time after
// which the Set must not be trusted.
func (s *Set) Until() time.Time {
	until := s.locks[0].Until()
	for _, l := range s.locks[1:] {
		if u := l.Until(); u.Before(until) {
			until = u
		}
	}
	return until
}

// Context returns a context that ends as soon as any of the Set's locks'
// contexts ends (see dlm.Lock.Context), with that lock's cause: an error
// matching dlm.ErrLost, or dlm.ErrUnlocked after Unlock. As a lock's, its
// Err and Value check the locks' validity against the clock first, so it
// has ended once a lock's validity ran out, however late a loaded machine
// runs the timers; Deadline reports Until.
func (s *Set) Context() context.Context { return s.ctx }

// setCtx is the Set's cancel-cause context, whose Err and Value (hence
// context.Cause) first end it when a lock's context ended (each lock's
// Err checks its validity against the clock).
type setCtx struct {
	context.Context
	s *Set
}

func (c *setCtx) Deadline() (time.Time, bool) { return c.s.Until(), true }
func (c *setCtx) Err() error                  { c.check(); return c.Context.Err() }
func (c *setCtx) Value(key any) any           { c.check(); return c.Context.Value(key) }
func (c *setCtx) String() string              { return "multilock.Set.Context" }

func (c *setCtx) check() {
	if c.Context.Err() != nil {
		return
	}
	for _, l := range c.s.locks {
		if lctx := l.Context(); lctx.Err() != nil {
			c.s.cancel(context.Cause(lctx))
			return
		}
	}
}

// Unlock releases every key, all at once, and ends the Set's context with
// dlm.ErrUnlocked. The error joins those of the keys whose release failed
// (see dlm.Lock.Unlock); a key that had expired makes it match
// dlm.ErrNotHeld.
func (s *Set) Unlock(ctx context.Context) error {
	s.cancel(dlm.ErrUnlocked)
	errs := make([]error, len(s.locks))
	var wg sync.WaitGroup
	for i, l := range s.locks {
		wg.Go(func() {
			if err := l.Unlock(ctx); err != nil {
				errs[i] = fmt.Errorf("multilock: %q: %w", l.Key(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// UnlockAt ends the Set as Unlock does, but leaves every key held on the
// servers until at (see dlm.Lock.UnlockAt), all at once. The error joins
// those of the keys that failed; each of those stays releasable.
func (s *Set) UnlockAt(ctx context.Context, at time.Time) error {
	s.cancel(dlm.ErrUnlocked)
	errs := make([]error, len(s.locks))
	var wg sync.WaitGroup
	for i, l := range s.locks {
		wg.Go(func() {
			if err := l.UnlockAt(ctx, at); err != nil {
				errs[i] = fmt.Errorf("multilock: %q: %w", l.Key(), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
