// Package rwlock provides a read-write lock over dlm: many readers or one
// writer, across processes, through any driver.Strategy.
//
// An RWLock named name is built from the strategy's own locks, taken
// through a dlm.Manager: a gate, the key name+":gate", and a semaphore of
// maxReaders permits (package semaphore, named name+":read"). A reader
// passes the gate (takes it and gives it back at once) and holds one
// permit; a writer holds the gate and every permit. A waiting writer holds
// the gate, so readers that arrive after it wait behind it: a stream of
// readers cannot starve a writer. Each part keeps its own lease, renewal
// and fence, and whatever the strategy promises for one lock.
//
// Fences: a writer's fence is the gate's fence, strictly greater than that
// of every earlier writer and reader. A reader's fence is the gate's fence
// it passed: greater than that of every writer that held the lock before
// it, and smaller than that of every writer after it. Storage that records
// the highest writer fence it has applied can thus tell a reader whether a
// newer writer has written since the reader began.
//
// Cost, against one plain lock: a reader makes three acquisitions or
// releases on its way in (gate, permit, gate, the last not waited for) and
// one on its way out; readers pass the gate one at a time, so entries are
// serialised while exits are not. A writer takes the gate, then every
// permit at once (one round trip per node with dlm's coalescing), and
// releases them all at once.
package rwlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/giveback"
	"github.com/dlmgo/dlm/multilock"
	"github.com/dlmgo/dlm/semaphore"
)

// A RWLock is a read-write lock shared by every process that names it
// alike. It is safe for concurrent use.
type RWLock struct {
	m       *dlm.Manager
	gate    string
	readers *semaphore.Semaphore
	permits []string
}

// ErrMismatch is matched by the error of an RWLock whose maximum number of
// readers differs from that of the other users of its name: the readers'
// semaphore (name+":read") records it (semaphore.Semaphore.CheckPermits).
// It is permanent: Lock and RLock return it at once.
var ErrMismatch = semaphore.ErrMismatch

// checkReaders confirms the number of readers (a reader's Acquire of a
// permit does the same); other failures are left to the permits' own calls.
func (rw *RWLock) checkReaders(ctx context.Context) error {
	if err := rw.readers.CheckPermits(ctx); errors.Is(err, ErrMismatch) {
		return errs.Within("rwlock: write", err)
	}
	return nil
}

// New returns the read-write lock name, taken through m, admitting at most
// maxReaders readers at a time (1 to semaphore.MaxPermits). Every process
// must use the same name and maxReaders: one that does not fails with
// ErrMismatch.
func New(m *dlm.Manager, name string, maxReaders int) (*RWLock, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: rwlock.New: nil Manager", dlm.ErrInvalid)
	}
	readers, err := semaphore.New(m, name+":read", maxReaders)
	if err != nil {
		return nil, errs.Within("rwlock.New", err)
	}
	rw := &RWLock{m: m, gate: name + ":gate", readers: readers}
	for i := range maxReaders {
		rw.permits = append(rw.permits, semaphore.PermitKey(name+":read", i))
	}
	return rw, nil
}

// A Hold is a read or a write hold on an RWLock. Its methods are safe for
// concurrent use.
type Hold struct {
	set    *multilock.Set
	fence  uint64
	write  bool
	passed <-chan struct{} // a reader's: closed once the gate was given back
}

// Fence returns the hold's fencing token (see the package documentation
// for what it means for a reader).
func (h *Hold) Fence() uint64 { return h.fence }

// Write reports whether this is a writer's hold.
func (h *Hold) Write() bool { return h.write }

// Context returns a context that ends as soon as any lock the hold is made
// of can no longer be trusted (see dlm.Lock.Context), or at Unlock.
func (h *Hold) Context() context.Context { return h.set.Context() }

// Until returns the time after which the hold must not be trusted.
func (h *Hold) Until() time.Time { return h.set.Until() }

// Locks returns the locks the hold is made of: a reader's permit; a
// writer's gate and then its permits.
func (h *Hold) Locks() []*dlm.Lock { return h.set.Locks() }

// Unlock gives the hold back, as multilock.Set.Unlock does. A reader's
// Unlock also waits (within ctx) for the gate it passed to be given back.
func (h *Hold) Unlock(ctx context.Context) error {
	err := h.set.Unlock(ctx)
	if h.passed != nil {
		select {
		case <-h.passed:
		case <-ctx.Done():
		}
	}
	return err
}

// UnlockAt ends the hold as Unlock does but leaves its locks held on the
// servers until at (see dlm.Lock.UnlockAt): after a writer's, nobody
// reads or writes before at; after a reader's, its permit stays taken, so
// writers wait until at while other readers come and go.
func (h *Hold) UnlockAt(ctx context.Context, at time.Time) error {
	err := h.set.UnlockAt(ctx, at)
	if h.passed != nil {
		select {
		case <-h.passed:
		case <-ctx.Done():
		}
	}
	return err
}

// RLock takes a read hold, waiting while a writer holds or waits for the
// lock and while maxReaders readers hold it, until it succeeds or ctx ends.
// RLock and Lock give back what they took before they return an error (for
// at most the Manager's TTL; the error says when a release failed).
func (rw *RWLock) RLock(ctx context.Context) (*Hold, error) {
	gate, err := rw.m.Lock(ctx, rw.gate)
	if err != nil {
		return nil, errs.Within("rwlock: read", err)
	}
	permit, err := rw.readers.Acquire(ctx)
	if err != nil {
		return nil, giveback.Wrap(errs.Within("rwlock: read", err), giveback.Locks(ctx, rw.m.TTL(), gate))
	}
	// The gate's release is not waited for here; Unlock waits for it.
	passed := make(chan struct{})
	go func() { _ = giveback.Locks(ctx, rw.m.TTL(), gate); close(passed) }()
	return &Hold{set: multilock.Of(permit), fence: gate.Fence(), passed: passed}, nil
}

// Lock takes the write hold, waiting while others read or write, until it
// succeeds or ctx ends. It takes the gate first, so readers arriving after
// it wait; then it waits for every reader's permit. When the gate's lease
// ends during that wait, Lock gives back what it took and starts over.
func (rw *RWLock) Lock(ctx context.Context) (*Hold, error) {
	if err := rw.checkReaders(ctx); err != nil {
		return nil, err
	}
	for {
		h, err := rw.lock(ctx)
		if !errors.Is(err, errGateLost) {
			return h, err
		}
	}
}

var errGateLost = errors.New("dlm: rwlock: the gate's lease ended while readers drained")

func (rw *RWLock) lock(ctx context.Context) (*Hold, error) {
	gate, err := rw.m.Lock(ctx, rw.gate)
	if err != nil {
		return nil, errs.Within("rwlock: write", err)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	context.AfterFunc(gate.Context(), func() { cancel(errGateLost) })
	locks := make([]*dlm.Lock, 1+len(rw.permits))
	locks[0] = gate
	var mu sync.Mutex
	var first error // the first permit's error
	var wg sync.WaitGroup
	for i, key := range rw.permits {
		wg.Go(func() {
			l, err := rw.m.Lock(wctx, key)
			mu.Lock()
			defer mu.Unlock()
			locks[1+i] = l
			if err != nil && first == nil {
				first = err
				cancel(err) // no need to wait for the other permits
			}
		})
	}
	wg.Wait()
	if first == nil && gate.Context().Err() == nil {
		return &Hold{set: multilock.Of(locks...), fence: gate.Fence(), write: true}, nil
	}
	// Decided before giving back: the gate's release ends its context,
	// which cancels wctx with errGateLost.
	lost := ctx.Err() == nil && (first == nil || context.Cause(wctx) == errGateLost)
	back := giveback.Locks(ctx, rw.m.TTL(), locks...)
	if lost {
		return nil, errGateLost
	}
	if first == nil {
		first = fmt.Errorf("%w: %w", dlm.ErrNotAcquired, context.Cause(ctx))
	}
	return nil, giveback.Wrap(errs.Within("rwlock: write", first), back)
}
