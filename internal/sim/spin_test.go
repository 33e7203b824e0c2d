package sim

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// cpuTime is the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestSpinningWaiter checks what the simulator found (every run with two
// workers per Manager and a slow attempt hung in virtual time): when the
// holder's reported TTL had passed and the first waiter's attempt was
// slow, the Manager's second waiter looped without sleeping (queue.go:
// pause returned 0 once q.expires was past, and timedOut refuses a waiter
// that is not first), burning a CPU until the attempt returned (519ms of
// CPU in a second). It runs in real time, since in virtual time the loop
// never let the clock move.
func TestSpinningWaiter(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: a few seconds")
	}
	one, two := spinCPU(t, 1), spinCPU(t, 2)
	t.Logf("CPU while waiting 1s: %v with one waiter, %v with two", one, two)
	if two > 3*one+50*time.Millisecond {
		t.Errorf("a second waiter used %v of CPU more in 1s of waiting: it spins", two-one)
	}
}

// spinCPU is the CPU the process uses in a second while waiters wait
// behind a slow attempt made after the holder's TTL passed.
func spinCPU(t *testing.T, waiters int) time.Duration {
	srv := dlmtest.NewServer()
	defer srv.Close()
	sa, _ := strategy.NewSingle(srv.Node())
	a, _ := dlm.New(sa, dlm.WithTTL(500*time.Millisecond))
	nb := srv.Node()
	sb, _ := strategy.NewSingle(nb)
	b, _ := dlm.New(sb, dlm.WithTTL(500*time.Millisecond))
	ctx := context.Background()
	if _, err := a.Lock(ctx, "k"); err != nil { // never unlocked: it lapses
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
			defer cancel()
			if l, err := b.Lock(cctx, "k"); err == nil {
				_ = l.Unlock(ctx)
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // both waiters were refused and know the TTL
	nb.SetDelay(2 * time.Second)       // the next attempt, at the TTL, is slow
	time.Sleep(600 * time.Millisecond) // past the TTL: the first waiter is trying
	c0 := cpuTime()
	time.Sleep(time.Second)
	used := cpuTime() - c0
	nb.SetDelay(0)
	wg.Wait()
	return used
}
