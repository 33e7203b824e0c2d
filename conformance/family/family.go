// Package family checks the rules of the lock family (packages semaphore,
// multilock and rwlock) over a driver.Strategy: the family is built on
// dlm.Manager over any strategy, so every strategy must keep its rules too.
// It is a package of its own so that package conformance, which a
// third-party driver's tests import, does not compile the family.
//
//	func TestFamily(t *testing.T) {
//		family.Run(t, func(t *testing.T) []driver.Node { return []driver.Node{node} },
//			func(nodes []driver.Node) (driver.Strategy, error) { return strategy.NewSingle(nodes[0]) })
//	}
package family

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/conformance/internal/suite"
	"github.com/dlmgo/dlm/multilock"
	"github.com/dlmgo/dlm/rwlock"
	"github.com/dlmgo/dlm/semaphore"
)

// Run checks that the strategies newStrategy builds over the nodes of
// nodes (called once per rule) keep the family's rules, each in a subtest
// named after the rule and under the conformance watchdog:
//
//   - SemaphorePermits: 8 workers on 3 permits: never more than 3 holders,
//     and more than one at times; with all held, TryAcquire is refused.
//   - SemaphoreLapsedPermit: a holder that stops (no renewal, no release)
//     loses its permit when its lease ends; a waiter gets it after the
//     stopped holder's Context has ended, not before.
//   - MultiKeyAllOrNone: overlapping sets named in different orders never
//     share a key and never deadlock; a refused TryLock holds nothing.
//   - RWLock: readers share, a writer is alone, fences order writers after
//     the readers and writers before them, and a writer among readers that
//     always overlap gets in within 5s (not starved).
//   - FamilyLapsedHolder: a multi-key holder and a writer that stop keep
//     their keys until their leases end; waiters get in after the stopped
//     holders' Contexts ended, not before.
func Run(t *testing.T, nodes func(t *testing.T) []driver.Node, newStrategy func(nodes []driver.Node) (driver.Strategy, error)) {
	t.Helper()
	if nodes == nil || newStrategy == nil {
		t.Fatal("family.Run: nil nodes or newStrategy")
	}
	run := suite.RunID()
	for _, rule := range rules {
		suite.Subtest(t, rule.name, func(t *testing.T) {
			s, err := newStrategy(nodes(t))
			if err != nil {
				t.Fatalf("newStrategy: %v", err)
			}
			rule.run(t, &familyCase{Strategy: s, prefix: suite.Prefix(run)})
		})
	}
}

var rules = []struct {
	name string
	run  func(t *testing.T, c *familyCase)
}{
	{"SemaphorePermits", testSemaphorePermits},
	{"SemaphoreLapsedPermit", testSemaphoreLapsedPermit},
	{"MultiKeyAllOrNone", testMultiKeyAllOrNone},
	{"RWLock", testRWLock},
	{"FamilyLapsedHolder", testFamilyLapsedHolder},
}

// familyCase is one rule's strategy and keys.
type familyCase struct {
	driver.Strategy
	prefix string
}

func (c *familyCase) key(name string) string { return c.prefix + name }

// settleTime bounds how long a strategy may take to undo a failed
// acquisition in the background.
const settleTime = time.Second

// manager returns a Manager over the case's strategy.
func (c *familyCase) manager(t *testing.T, opts ...dlm.Option) *dlm.Manager {
	t.Helper()
	m, err := dlm.New(c.Strategy, append([]dlm.Option{dlm.WithRetryDelay(time.Millisecond, 50*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("dlm.New: %v", err)
	}
	return m
}

// occupancy counts the holders inside one critical section: a holder
// enters after its acquisition returned and leaves before it releases, so
// more holders inside than allowed means the server granted too many.
type occupancy struct {
	mu        sync.Mutex
	in, peak  int
	overflows int
}

func (o *occupancy) enter(limit int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.in++
	o.peak = max(o.peak, o.in)
	if o.in > limit {
		o.overflows++
	}
}

func (o *occupancy) leave() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.in--
}

// familyTimeout bounds each rule's waits: a rule that deadlocks fails
// within it.
const familyTimeout = 20 * time.Second

func familyCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), familyTimeout)
	t.Cleanup(cancel)
	return c
}

// testSemaphorePermits: 8 workers take turns on a semaphore of 3 permits;
// never more than 3 hold one, more than one does at times, and with all 3
// held TryAcquire is refused.
func testSemaphorePermits(t *testing.T, c *familyCase) {
	const permits, workers, rounds = 3, 8, 4
	m := c.manager(t)
	sem, err := semaphore.New(m, c.key("sem"), permits)
	if err != nil {
		t.Fatal(err)
	}
	cx := familyCtx(t)
	var occ occupancy
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range rounds {
				p, err := sem.Acquire(cx)
				if err != nil {
					errs <- err
					return
				}
				occ.enter(permits)
				time.Sleep(10 * time.Millisecond)
				occ.leave()
				if err := p.Unlock(cx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Acquire or Unlock: %v", err)
	}
	if occ.overflows > 0 || occ.peak < 2 {
		t.Fatalf("%d workers on %d permits: at most %d held at once (%d times too many); want between 2 and %d", workers, permits, occ.peak, occ.overflows, permits)
	}
	var held []*dlm.Lock
	for range permits {
		p, err := sem.TryAcquire(cx)
		if err != nil {
			t.Fatalf("TryAcquire of a free permit: %v", err)
		}
		held = append(held, p)
	}
	if p, err := sem.TryAcquire(cx); err == nil || !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("TryAcquire with every permit held: %v, %v; want an error matching dlm.ErrNotAcquired", p, err)
	}
	keys := map[string]bool{}
	for _, p := range held {
		keys[p.Key()] = true
		_ = p.Unlock(cx)
	}
	if len(keys) != permits {
		t.Fatalf("%d permits held on %d keys", permits, len(keys))
	}
}

// testSemaphoreLapsedPermit: of two permits, one holder renews and the
// other stops (no renewal, no release); the stopped one loses its permit
// when its lease ends, and not before: a waiter gets that permit only after
// the stopped holder's Context has ended.
func testSemaphoreLapsedPermit(t *testing.T, c *familyCase) {
	const lease = time.Second
	m := c.manager(t, dlm.WithTTL(lease))
	sem, err := semaphore.New(m, c.key("sem"), 2)
	if err != nil {
		t.Fatal(err)
	}
	cx := familyCtx(t)
	stopped, err := sem.TryAcquire(cx) // never renewed nor released
	if err != nil {
		t.Fatal(err)
	}
	// The live holder's lease is long, so that a renewal a loaded machine
	// makes late does not lose it (its permit was then granted instead).
	renewed, err := semaphore.New(c.manager(t, dlm.WithTTL(10*lease), dlm.WithAutoRenew(0.3, time.Minute)), c.key("sem"), 2)
	if err != nil {
		t.Fatal(err)
	}
	other, err := renewed.TryAcquire(cx) // a live holder of the other permit
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, err := sem.Acquire(cx)
	if err != nil {
		t.Fatalf("Acquire while a stopped holder's lease runs out: %v", err)
	}
	took := time.Since(start)
	if stopped.Context().Err() == nil {
		t.Fatalf("a permit was granted after %v while the stopped holder's Context (until %v) had not ended", took, time.Until(stopped.Until()))
	}
	if took > lease+2*time.Second {
		t.Errorf("the lapsed permit came back after %v; want within the lease (%v) and a little", took, lease)
	}
	if p.Key() != stopped.Key() {
		t.Errorf("granted %s; the lapsed permit was %s", p.Key(), stopped.Key())
	}
	_ = p.Unlock(cx)
	_ = other.Unlock(cx)
}

// testMultiKeyAllOrNone: four workers lock overlapping sets, named in
// different orders; no key ever has two holders and every worker finishes
// (no deadlock). TryLock of a set with one key held takes none of it.
func testMultiKeyAllOrNone(t *testing.T, c *familyCase) {
	m := c.manager(t, dlm.WithTTL(5*time.Second))
	cx := familyCtx(t)
	k := func(name string) string { return c.key(name) }
	sets := [][]string{{k("a"), k("b"), k("c")}, {k("c"), k("b"), k("a")}, {k("b"), k("d")}, {k("d"), k("a")}}
	occ := map[string]*occupancy{}
	for _, s := range sets {
		for _, key := range s {
			occ[key] = &occupancy{}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(sets))
	for _, keys := range sets {
		wg.Go(func() {
			for range 5 {
				s, err := multilock.Lock(cx, m, keys...)
				if err != nil {
					errs <- err
					return
				}
				for _, key := range keys {
					occ[key].enter(1)
				}
				time.Sleep(2 * time.Millisecond)
				for _, key := range keys {
					occ[key].leave()
				}
				if err := s.Unlock(cx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("multilock: %v (a deadlock ends this way, at the rule's %v timeout)", err, familyTimeout)
	}
	for key, o := range occ {
		if o.overflows > 0 {
			t.Errorf("%s had two holders at once %d times", key, o.overflows)
		}
	}

	b, err := m.TryLock(cx, k("b"))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := multilock.TryLock(cx, m, k("a"), k("b")); err == nil || !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("TryLock of {a, b} with b held: %v, %v; want an error matching dlm.ErrNotAcquired", s, err)
	}
	// The set's a was given back, in the background.
	var a *dlm.Lock
	for deadline := time.Now().Add(settleTime); ; time.Sleep(10 * time.Millisecond) {
		if a, err = m.TryLock(cx, k("a")); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("a is still held %v after a refused TryLock of {a, b}: %v", settleTime, err)
	}
	_ = a.Unlock(cx)
	_ = b.Unlock(cx)
}

// testRWLock: readers share; a writer is alone; fences order writers after
// the readers before them; a writer is not starved by a stream of readers
// that always overlap.
func testRWLock(t *testing.T, c *familyCase) {
	m := c.manager(t, dlm.WithTTL(5*time.Second))
	rw, err := rwlock.New(m, c.key("rw"), 4)
	if err != nil {
		t.Fatal(err)
	}
	cx := familyCtx(t)
	readersExcludeWriter(t, cx, rw)

	// A stream of readers, always one inside, and writers among them.
	s := &rwStream{rw: rw, cx: cx, stop: make(chan struct{}), errs: make(chan error, 8)}
	for range 3 {
		s.wg.Go(s.read)
	}
	// The writers come once the stream has had two readers inside at once
	// (on a loaded machine that may take longer than a few reads).
	s.awaitSharing(5 * time.Second)
	for range 3 {
		s.write(t)
	}
	close(s.stop)
	s.wg.Wait()
	close(s.errs)
	for err := range s.errs {
		t.Error(err)
	}
	if s.badFences > 0 {
		t.Errorf("%d readers got a fence not above the last writer's", s.badFences)
	}
	if s.readers.overflows > 0 || s.writers.overflows > 0 {
		t.Fatalf("a writer shared the lock: %d times with readers inside, %d readers inside with a writer", s.readers.overflows, s.writers.overflows)
	}
	if s.readers.peak < 2 {
		t.Errorf("at most %d reader inside at once; readers must share", s.readers.peak)
	}
}

// readersExcludeWriter checks that two readers share rw and that a writer
// is refused while they are inside.
func readersExcludeWriter(t *testing.T, cx context.Context, rw *rwlock.RWLock) {
	t.Helper()
	r1, err := rw.RLock(cx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.RLock(cx)
	if err != nil {
		t.Fatalf("a second reader beside the first: %v", err)
	}
	short, cancel := context.WithTimeout(cx, 200*time.Millisecond)
	w, err := rw.Lock(short)
	cancel()
	if err == nil || !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("Lock with two readers inside: %v, %v; want an error matching dlm.ErrNotAcquired", w, err)
	}
	_ = r1.Unlock(cx)
	_ = r2.Unlock(cx)
}

// An rwStream is testRWLock's stream of readers and its writers: who is
// inside, and the fences the writers got.
type rwStream struct {
	rw               *rwlock.RWLock
	cx               context.Context
	readers, writers occupancy
	stop             chan struct{}
	wg               sync.WaitGroup
	errs             chan error

	fenceMu   sync.Mutex
	lastWrite uint64
	badFences int // readers whose fence is not above the last writer's
}

// read is one reader of the stream: until stop, it takes a read lock,
// notes a writer inside with it and a fence not above the last writer's,
// holds it for 15ms and gives it up.
func (s *rwStream) read() {
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		h, err := s.rw.RLock(s.cx)
		if err != nil {
			s.errs <- fmt.Errorf("RLock: %w", err)
			return
		}
		s.readers.enter(4)
		s.writers.mu.Lock()
		if s.writers.in > 0 {
			s.writers.overflows++ // a reader inside with a writer
		}
		s.writers.mu.Unlock()
		s.fenceMu.Lock()
		if h.Fence() <= s.lastWrite {
			s.badFences++
		}
		s.fenceMu.Unlock()
		time.Sleep(15 * time.Millisecond)
		s.readers.leave()
		if err := h.Unlock(s.cx); err != nil {
			s.errs <- fmt.Errorf("RUnlock: %w", err)
			return
		}
	}
}

// awaitSharing waits, up to limit, until two readers have been inside at
// once.
func (s *rwStream) awaitSharing(limit time.Duration) {
	for shared := time.Now().Add(limit); ; time.Sleep(5 * time.Millisecond) {
		s.readers.mu.Lock()
		peak := s.readers.peak
		s.readers.mu.Unlock()
		if peak >= 2 || time.Now().After(shared) {
			break
		}
	}
}

// write is one writer among the readers: it must get the lock within 5s,
// alone, with a fence above the last writer's.
func (s *rwStream) write(t *testing.T) {
	t.Helper()
	start := time.Now()
	h, err := s.rw.Lock(s.cx)
	if err != nil {
		close(s.stop)
		s.wg.Wait()
		t.Fatalf("a writer among a stream of readers: %v after %v", err, time.Since(start))
	}
	s.writers.enter(1)
	s.readers.mu.Lock()
	if s.readers.in > 0 {
		s.readers.overflows++ // a writer inside with a reader
	}
	s.readers.mu.Unlock()
	s.fenceMu.Lock()
	if h.Fence() <= s.lastWrite {
		t.Errorf("writer fence %d not above the last writer's %d", h.Fence(), s.lastWrite)
	}
	s.lastWrite = h.Fence()
	s.fenceMu.Unlock()
	time.Sleep(5 * time.Millisecond)
	s.writers.leave()
	if err := h.Unlock(s.cx); err != nil {
		t.Errorf("Unlock: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a writer waited %v among readers that always overlap (starved)", took)
	}
}

// testFamilyLapsedHolder: a multi-key holder and a writer that stop (no
// renewal, no release) hold their keys until their leases end, and not
// after: a waiter gets in only once the stopped holder's Context has ended.
func testFamilyLapsedHolder(t *testing.T, c *familyCase) {
	const lease = time.Second
	m := c.manager(t, dlm.WithTTL(lease))
	cx := familyCtx(t)
	stoppedSet, err := multilock.TryLock(cx, m, c.key("a"), c.key("b"))
	if err != nil {
		t.Fatal(err)
	}
	rw, err := rwlock.New(m, c.key("rw"), 2)
	if err != nil {
		t.Fatal(err)
	}
	stoppedWriter, err := rw.Lock(cx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() {
		s, err := multilock.Lock(cx, m, c.key("c"), c.key("b"))
		if err != nil {
			t.Errorf("multilock.Lock behind a stopped holder: %v", err)
			return
		}
		if stoppedSet.Context().Err() == nil {
			t.Errorf("a set sharing b was granted after %v while the stopped holder's Context had not ended", time.Since(start))
		}
		_ = s.Unlock(cx)
	})
	wg.Go(func() {
		r, err := rw.RLock(cx)
		if err != nil {
			t.Errorf("RLock behind a stopped writer: %v", err)
			return
		}
		if stoppedWriter.Context().Err() == nil {
			t.Errorf("a reader got in after %v while the stopped writer's Context had not ended", time.Since(start))
		}
		_ = r.Unlock(cx)
	})
	wg.Wait()
	if took := time.Since(start); took > lease+2*time.Second {
		t.Errorf("the stopped holders' keys came back after %v; want within the lease (%v) and a little", took, lease)
	}
}
