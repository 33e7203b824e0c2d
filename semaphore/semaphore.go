// Package semaphore provides a counting semaphore over dlm: at most N
// holders at a time, across processes, through any driver.Strategy.
//
// A Semaphore of N permits is N locks, one per permit, taken through a
// dlm.Manager: a permit is a *dlm.Lock of its own, with its own lease,
// renewal (dlm.WithAutoRenew), Context and fence (strictly increasing per
// permit). A holder that crashes or stalls loses its permit when its lease
// ends, and the permit is free again for others. Because it is made of the
// strategy's locks, a Semaphore keeps whatever the strategy promises for
// one lock, Redlock's quorum and failover's replica acknowledgement
// included.
//
// Cost: taking a free permit is one acquisition (a random permit first,
// then, when it was taken, all the others at once, which dlm's coalescing
// sends in one round trip per node, giving back before it returns any
// others it got); a waiter subscribes to the release notifications of
// every permit. The first acquisition of a name in a process also
// confirms that the name's other users have the same number of permits
// (CheckPermits): one more acquisition, on the key CountKey(name),
// repeated every half day. Waiters are not served in arrival order, and while one
// caller gives back extra permits, another's TryAcquire may find them held.
package semaphore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/internal/errs"
	"github.com/dlmgo/dlm/internal/giveback"
	"github.com/dlmgo/dlm/internal/mgr"
)

// MaxPermits bounds the permits of a Semaphore.
const MaxPermits = 1024

// A Semaphore hands out at most a fixed number of permits at a time. It is
// safe for concurrent use; Semaphores of the same name and number of
// permits, in any process, share the permits.
type Semaphore struct {
	m    *dlm.Manager
	name string
	keys []string // one per permit
}

// ErrMismatch is matched by the error of a Semaphore whose number of permits
// differs from that of the other users of its name (see CheckPermits). It
// is permanent (dlm.Permanent): Acquire returns it at once.
var ErrMismatch = errors.New("dlm: semaphore: number of permits differs between users of the name")

// A mismatchError is ErrMismatch for one Semaphore.
type mismatchError struct {
	name    string
	permits int
	theirs  string // the number recorded, when known
	cause   error  // the refusal of the record
}

func (e *mismatchError) Error() string {
	if e.theirs != "" {
		return fmt.Sprintf("semaphore %q: %v: %d here, %s recorded by the others", e.name, ErrMismatch, e.permits, e.theirs)
	}
	return fmt.Sprintf("semaphore %q: %v: %d here, another recorded (%v)", e.name, ErrMismatch, e.permits, e.cause)
}
func (e *mismatchError) Is(target error) bool { return target == ErrMismatch }
func (e *mismatchError) Permanent() bool      { return true }

// countTTL is how long the record of a name's number of permits lasts
// after its last check (see CheckPermits).
const countTTL = dlm.MaxTTL

// CheckPermits confirms that every user of the semaphore's name that has
// checked within the last day uses the same number of permits, and
// records this Semaphore's number when none has: the record is a lock on
// the key name+":permits" (CountKey) held by a token naming the number, for
// a day from its last check (for the Manager's TTL on a strategy whose
// leases are bounded, strategy.WithMaxTTL), taken through the Manager's
// strategy (a majority of Redlock's masters; its own hash slot on a
// Cluster). When another number holds the record the error matches
// ErrMismatch. A check by a Semaphore of the same Manager, name and number
// within the first half of the record's life counts, so the calls of
// Acquire and TryAcquire, and of Semaphores made afresh for each use, cost
// one more acquisition a half day per process. To change the number, stop
// every user and revoke the record (dlm revoke), or let it run out.
func (s *Semaphore) CheckPermits(ctx context.Context) error {
	ck := checkKey{weak.Make(s.m), s.name, len(s.keys)}
	if due, ok := checked.Load(ck); ok && time.Now().Before(due.(time.Time)) {
		return nil
	}
	token := "permits:" + strconv.Itoa(len(s.keys))
	st := mgr.Of(s.m).Strategy.(driver.Strategy)
	ttl := countTTL
	_, err := st.Acquire(ctx, CountKey(s.name), token, ttl)
	if errors.Is(err, dlm.ErrInvalid) {
		// A strategy whose leases are bounded takes at least the
		// Manager's TTL; the record lasts as long.
		ttl = s.m.TTL()
		_, err = st.Acquire(ctx, CountKey(s.name), token, ttl)
	}
	switch {
	case err == nil:
		if checkedN.Add(1) > maxChecked { // bound the memory of many names
			checked.Clear()
			checkedN.Store(0)
		}
		checked.Store(ck, time.Now().Add(ttl/2))
		return nil
	case errors.Is(err, dlm.ErrHeld):
		e := &mismatchError{name: s.name, permits: len(s.keys), cause: err}
		// Name the recorded number where the strategy can tell.
		if info, ierr := inspect.Key(ctx, st, CountKey(s.name)); ierr == nil && info.Held {
			if n, ok := strings.CutPrefix(info.Token, "permits:"); ok {
				e.theirs = n
			}
		}
		return e
	}
	return s.wrap(err)
}

// checked maps the checkKey of each recent check to the time when it
// must be made again.
var (
	checked  sync.Map
	checkedN atomic.Int64
)

const maxChecked = 4096

// A checkKey names a check of CheckPermits; it does not keep its Manager
// alive.
type checkKey struct {
	m       weak.Pointer[dlm.Manager]
	name    string
	permits int
}

// CountKey returns the key that records the number of permits of the
// semaphore name (see Semaphore.CheckPermits).
func CountKey(name string) string { return name + ":permits" }

// New returns a Semaphore of permits permits named name, taken through m
// (whose TTL and options every permit gets). Every process must use the
// same name and number of permits: the permits are the keys
// PermitKey(name, 0) to PermitKey(name, permits-1). A Semaphore with
// another number than the other users' fails with ErrMismatch (see
// CheckPermits) instead of admitting extra holders.
func New(m *dlm.Manager, name string, permits int) (*Semaphore, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: semaphore.New: nil Manager", dlm.ErrInvalid)
	}
	if permits < 1 || permits > MaxPermits {
		return nil, fmt.Errorf("%w: semaphore.New(%q, %d): permits must be in [1, %d]", dlm.ErrInvalid, name, permits, MaxPermits)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: semaphore.New: empty name", dlm.ErrInvalid)
	}
	s := &Semaphore{m: m, name: name, keys: make([]string, permits)}
	for i := range s.keys {
		s.keys[i] = PermitKey(name, i)
	}
	if err := mgr.CheckKey(s.keys[permits-1]); err != nil {
		return nil, errs.Within("semaphore.New", err)
	}
	return s, nil
}

// PermitKey returns the key of permit i of the semaphore name. A name with
// a Cluster hash tag ({...}) puts all its permits in one hash slot.
func PermitKey(name string, i int) string { return name + ":permit:" + strconv.Itoa(i) }

// Permits returns the number of permits.
func (s *Semaphore) Permits() int { return len(s.keys) }

// TryAcquire makes one attempt to take a permit. When every permit is held
// the error matches dlm.ErrNotAcquired, and dlm.RetryAfter reports how long
// the permit nearest its end has left.
//
// The returned Lock is the permit: keep its Context for the work the permit
// allows, and Unlock it to give the permit back (or UnlockAt, to keep the
// permit taken until a given time).
func (s *Semaphore) TryAcquire(ctx context.Context) (*dlm.Lock, error) {
	if err := s.CheckPermits(ctx); err != nil {
		return nil, err
	}
	first := rand.IntN(len(s.keys))
	l, err := s.m.TryLock(ctx, s.keys[first])
	if err == nil || len(s.keys) == 1 || dlm.Permanent(err) || ctx.Err() != nil {
		return l, s.wrap(err)
	}
	// The random permit was taken: try all the others at once.
	type result struct {
		l   *dlm.Lock
		err error
	}
	results := make(chan result, len(s.keys)-1)
	for i := 1; i < len(s.keys); i++ {
		key := s.keys[(first+i)%len(s.keys)]
		go func() {
			l, err := s.m.TryLock(ctx, key)
			results <- result{l, err}
		}()
	}
	var won *dlm.Lock
	var extra []*dlm.Lock
	best := err
	for range len(s.keys) - 1 {
		r := <-results
		switch {
		case r.err != nil:
			best = better(best, r.err)
		case won == nil:
			won = r.l
		default:
			extra = append(extra, r.l)
		}
	}
	// More than one permit was free: give the others back before returning,
	// even when ctx ended meanwhile, so that this caller's next attempt, or
	// another process, finds them free.
	back := giveback.Locks(ctx, s.m.TTL(), extra...)
	if won != nil {
		return won, nil // the extra permits' leases run out if back failed
	}
	return nil, giveback.Wrap(s.wrap(best), back)
}

// better picks the error that tells a caller more: a permanent error over
// any other, a refusal by a holder with the shortest remaining lease over
// other refusals, and a refusal over a node failure.
func better(a, b error) error {
	switch {
	case dlm.Permanent(a):
		return a
	case dlm.Permanent(b):
		return b
	}
	da, okA := dlm.RetryAfter(a)
	db, okB := dlm.RetryAfter(b)
	switch {
	case okA && okB && db < da:
		return b
	case okA || !errors.Is(b, dlm.ErrNotAcquired):
		return a
	}
	return b
}

func (s *Semaphore) wrap(err error) error {
	if err == nil {
		return nil
	}
	return errs.Within(fmt.Sprintf("semaphore %q", s.name), err)
}

// Acquire takes a permit, waiting while all are held, until it succeeds or
// ctx ends. A waiter tries again when a permit is released (through release
// notifications, where the strategy offers them), when the permit nearest
// its end runs out, and at the Manager's maximum retry delay in any case.
// Errors that waiting cannot cure (dlm.Permanent) end the wait at once.
// When ctx ends first the error matches dlm.ErrNotAcquired and ctx's error.
func (s *Semaphore) Acquire(ctx context.Context) (*dlm.Lock, error) {
	minDelay, maxDelay := mgr.Of(s.m).RetryMin, mgr.Of(s.m).RetryMax
	delay := minDelay
	var w *watch
	defer func() { w.stop() }()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l, err := s.TryAcquire(ctx)
		if err == nil || dlm.Permanent(err) {
			return l, err
		}
		if ctx.Err() != nil {
			return nil, giveUp(ctx, err)
		}
		if w == nil {
			// Subscribe, then try again at once: a release between the
			// attempt and the subscription would not be announced.
			w = s.watch(ctx, maxDelay)
			continue
		}
		var d time.Duration
		if w.notify {
			d = maxDelay/2 + rand.N(maxDelay/2+1)
		} else {
			d = delay/2 + rand.N(delay/2+1)
			delay = min(2*delay, maxDelay)
		}
		if rem, ok := dlm.RetryAfter(err); ok {
			d = min(d, rem+time.Millisecond+rand.N(time.Millisecond))
		}
		timer.Reset(d)
		select {
		case <-w.released:
		case <-timer.C:
		case <-ctx.Done():
			return nil, giveUp(ctx, err)
		}
	}
}

func giveUp(ctx context.Context, last error) error {
	if errors.Is(last, dlm.ErrNotAcquired) {
		return fmt.Errorf("%w (%w)", last, context.Cause(ctx))
	}
	return fmt.Errorf("%w: %w (last attempt: %w)", dlm.ErrNotAcquired, context.Cause(ctx), last)
}

// A watch gathers the release notifications of every permit.
type watch struct {
	released chan struct{} // buffered: one pending notification
	notify   bool          // every permit notifies; false: poll
	stops    []func()
}

// watch subscribes to the releases of every permit, within bound. When a
// permit cannot be watched, none is, and the caller polls.
func (s *Semaphore) watch(ctx context.Context, bound time.Duration) *watch {
	w := &watch{released: make(chan struct{}, 1)}
	poke := func() {
		select {
		case w.released <- struct{}{}:
		default:
		}
	}
	sctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := false
	for _, key := range s.keys {
		wg.Go(func() {
			stop, err := mgr.Of(s.m).Strategy.WatchRelease(sctx, key, poke)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = true
				return
			}
			w.stops = append(w.stops, stop)
		})
	}
	wg.Wait()
	w.notify = !failed
	if failed {
		w.stop()
	}
	return w
}

func (w *watch) stop() {
	if w == nil {
		return
	}
	for _, stop := range w.stops {
		go stop()
	}
	w.stops = nil
}
