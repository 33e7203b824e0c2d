package dlmtest_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// A ledger records, in the bubble's time, when each lock was held, and
// fails the test when two holders overlap or a fence does not increase.
type ledger struct {
	t         *testing.T
	mu        sync.Mutex
	holder    *dlm.Lock // the lock whose lease is running, or nil
	lastFence uint64
	lastUntil time.Time // the validity of the last lock given up or lost
}

// acquired records l, granted now.
func (g *ledger) acquired(l *dlm.Lock) {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if g.holder != nil && now.Before(g.holder.Until()) && g.holder.Context().Err() == nil {
		g.t.Errorf("%s granted with fence %d while the holder with fence %d was valid until %v", l.Key(), l.Fence(), g.holder.Fence(), g.holder.Until())
	}
	if now.Before(g.lastUntil) {
		g.t.Errorf("%s granted with fence %d at %v, before the last lease's validity ended (%v)", l.Key(), l.Fence(), now, g.lastUntil)
	}
	if l.Fence() <= g.lastFence {
		g.t.Errorf("fence %d granted after fence %d: fences must increase", l.Fence(), g.lastFence)
	}
	g.holder, g.lastFence = l, l.Fence()
}

// released records that l's holder stops using it now.
func (g *ledger) released(l *dlm.Lock) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holder == l {
		g.holder = nil
	}
}

// lost records that l's Context ended by itself (its lease could no
// longer be trusted): the validity it had must not have passed, and no
// one may be granted the key before that validity.
func (g *ledger) lost(l *dlm.Lock) {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	until := l.Until()
	if time.Now().After(until) {
		g.t.Errorf("lock with fence %d: its Context ended at %v, after its validity %v", l.Fence(), time.Now(), until)
	}
	if g.holder == l {
		g.holder = nil
	}
	if until.After(g.lastUntil) {
		g.lastUntil = until
	}
}

// scenario runs, in a bubble, the lifecycle every strategy must keep:
// lock, a second client waiting and getting the lock on unlock (hand-off
// or release), renewal across many TTLs, and expiry when the holder is
// cut off from its servers. newManager returns client i's Manager and a
// function that cuts it off (on) or heals it.
func scenario(t *testing.T, newManager func(t *testing.T, i int) (*dlm.Manager, func(on bool))) {
	g := &ledger{t: t}
	a, cutA := newManager(t, 0)
	b, _ := newManager(t, 1)
	ctx := context.Background()
	const key = "orders:42"

	// Lock, then a waiter that gets it on Unlock.
	first, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatalf("first Lock: %v", err)
	}
	g.acquired(first)
	got := make(chan *dlm.Lock, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		l, err := b.Lock(wctx, key)
		if err != nil {
			t.Errorf("waiting Lock: %v", err)
		}
		got <- l
	}()
	time.Sleep(5 * time.Second) // work under the lock
	synctest.Wait()
	select {
	case <-got:
		t.Fatal("the waiter got the lock while it was held")
	default:
	}
	g.released(first)
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	start := time.Now()
	second := <-got
	if second == nil {
		return
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("the waiter got the lock %v after Unlock, want within a round trip (notification or hand-off)", waited)
	}
	g.acquired(second)
	if !errors.Is(context.Cause(first.Context()), dlm.ErrUnlocked) {
		t.Errorf("the unlocked lock's Context: cause %v, want dlm.ErrUnlocked", context.Cause(first.Context()))
	}
	g.released(second)
	if err := second.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	// Renewal: a lock held for six TTLs stays live.
	held, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatalf("Lock to renew: %v", err)
	}
	g.acquired(held)
	time.Sleep(6 * a.TTL())
	if err := held.Context().Err(); err != nil {
		t.Fatalf("a renewed lock's Context ended after six TTLs: %v", context.Cause(held.Context()))
	}

	// Expiry: the holder is cut off; its Context ends before its validity,
	// and the other client gets the lock only after that validity.
	lostAt := make(chan struct{})
	go func() {
		<-held.Context().Done()
		if errors.Is(context.Cause(held.Context()), dlm.ErrLost) {
			g.lost(held)
		} else {
			t.Errorf("cut-off holder's Context ended with %v, want dlm.ErrLost", context.Cause(held.Context()))
		}
		close(lostAt)
	}()
	cutA(true)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	third, err := b.Lock(wctx, key)
	if err != nil {
		t.Fatalf("Lock after the holder was cut off: %v", err)
	}
	<-lostAt
	g.acquired(third)
	cutA(false)
	g.released(third)
	if err := third.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	_ = held.Unlock(ctx) // the lost lock: nothing to release
	// The strategies' background work (clean-up, idle workers) ends
	// within a minute; a bubble ends only when every goroutine has.
	time.Sleep(time.Minute)
}

func manager(t *testing.T, s driver.Strategy, err error) *dlm.Manager {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return newManager(t, s)
}

func newManager(t *testing.T, s driver.Strategy) *dlm.Manager {
	t.Helper()
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second), dlm.WithAutoRenew(1.0/3, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSingle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer()
		defer srv.Close()
		scenario(t, func(t *testing.T, i int) (*dlm.Manager, func(bool)) {
			n := srv.Node()
			s, err := strategy.NewSingle(n)
			return manager(t, s, err), n.Partition
		})
	})
}

func TestRedlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var srvs []*dlmtest.Server
		for range 3 {
			srv := dlmtest.NewServer()
			defer srv.Close()
			srvs = append(srvs, srv)
		}
		// One master is slow throughout: a minority changes nothing.
		srvs[2].SetDelay(50 * time.Millisecond)
		scenario(t, func(t *testing.T, i int) (*dlm.Manager, func(bool)) {
			var nodes []driver.Node
			var own []*dlmtest.Node
			for _, srv := range srvs {
				n := srv.Node()
				nodes, own = append(nodes, n), append(own, n)
			}
			s, err := strategy.NewRedlock(nodes)
			return manager(t, s, err), func(on bool) {
				for _, n := range own {
					n.Partition(on)
				}
			}
		})
	})
}

func TestFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := dlmtest.NewServer(dlmtest.WithReplicas(2))
		defer srv.Close()
		newFailover := func(n driver.Node) (driver.Strategy, error) {
			return strategy.NewFailover(n, strategy.WithAcks(strategy.AckAll()), strategy.WithReplicas(2))
		}
		scenario(t, func(t *testing.T, i int) (*dlm.Manager, func(bool)) {
			n := srv.Node()
			s, err := newFailover(n)
			return manager(t, s, err), n.Partition
		})

		// A replica that acknowledges nothing: AckAll refuses the lock.
		fo, err := newFailover(srv.Node())
		m := manager(t, fo, err)
		ctx := context.Background()
		r := srv.Replicas()[1]
		r.Freeze(true)
		if l, err := m.TryLock(ctx, "frozen"); err == nil {
			t.Errorf("TryLock with a frozen replica and AckAll: granted fence %d, want a refusal", l.Fence())
		}
		r.Freeze(false)

		// A lock acknowledged by every replica survives a failover: the
		// promoted replica refuses it to another client.
		l, err := m.TryLock(ctx, "kept")
		if err != nil {
			t.Fatalf("TryLock with replicas acknowledging: %v", err)
		}
		srv.Promote(srv.Replicas()[0])
		fo, err = newFailover(srv.Node())
		other := manager(t, fo, err)
		if _, err := other.TryLock(ctx, "kept"); !errors.Is(err, dlm.ErrNotAcquired) {
			t.Errorf("TryLock after a failover of a lock every replica acknowledged: %v, want dlm.ErrNotAcquired", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Errorf("Unlock on the promoted replica: %v", err)
		}
		time.Sleep(time.Minute)
	})
}

// TestSeededFaults: clients of Single and Redlock take one key in turn
// while their links lose and delay requests and replies at random (from a
// fixed seed, through Node.SetFaults): no two valid leases overlap and
// fences increase.
func TestSeededFaults(t *testing.T) {
	for _, servers := range []int{1, 3} {
		t.Run(map[int]string{1: "single", 3: "redlock"}[servers], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { seeded(t, servers, 7) })
		})
	}
}

func seeded(t *testing.T, servers int, seed uint64) {
	var srvs []*dlmtest.Server
	for range servers {
		srv := dlmtest.NewServer()
		defer srv.Close()
		srvs = append(srvs, srv)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	var rngMu sync.Mutex
	faults := func(reply bool) dlmtest.Fault {
		rngMu.Lock()
		defer rngMu.Unlock()
		f := dlmtest.Fault{Delay: time.Duration(rng.IntN(200)) * time.Millisecond}
		f.Drop = rng.IntN(20) == 0
		return f
	}
	g := &ledger{t: t}
	var wg sync.WaitGroup
	grants := 0
	for c := range 3 {
		var nodes []driver.Node
		for _, srv := range srvs {
			n := srv.Node()
			n.SetFaults(faults)
			nodes = append(nodes, n)
		}
		var s driver.Strategy
		var err error
		if servers == 1 {
			s, err = strategy.NewSingle(nodes[0], strategy.WithTimeout(time.Second))
		} else {
			s, err = strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
		}
		m := manager(t, s, err)
		wg.Go(func() {
			for i := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				l, err := m.Lock(ctx, "k")
				cancel()
				if err != nil {
					continue
				}
				g.acquired(l)
				rngMu.Lock()
				grants++
				rngMu.Unlock()
				ended := make(chan struct{})
				go func() {
					defer close(ended)
					<-l.Context().Done()
					if errors.Is(context.Cause(l.Context()), dlm.ErrLost) {
						g.lost(l)
					}
				}()
				time.Sleep(time.Duration(c*7+i%5) * time.Second) // work, some of it longer than the TTL
				g.released(l)
				uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = l.Unlock(uctx)
				cancel()
				<-ended
			}
		})
	}
	wg.Wait()
	if grants < 20 {
		t.Errorf("%d grants in 60 attempts under faults, want at least 20", grants)
	}
	t.Logf("%d grants of 60 attempts", grants)
	time.Sleep(time.Minute)
}
