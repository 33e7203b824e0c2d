package dlm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"
)

// checkHeap fails unless h is a 4-ary min-heap whose locks know their
// indexes.
func checkHeap(t *testing.T, h dueHeap) {
	t.Helper()
	for i, e := range h {
		if int(e.l.hidx) != i {
			t.Fatalf("lock at %d has hidx %d", i, e.l.hidx)
		}
		if i > 0 && h[(i-1)/4].at > e.at {
			t.Fatalf("entry %d (due %d) below its parent (due %d)", i, e.at, h[(i-1)/4].at)
		}
	}
}

// The renewer's heap keeps its order and each lock's index through random
// pushes and removals anywhere, hands locks out in due order, and gives
// memory back once it has shrunk.
func TestDueHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h dueHeap
	var in []*Lock
	for step := range 20000 {
		if len(in) == 0 || rng.IntN(3) > 0 {
			l := &Lock{}
			h.push(l, rng.Int64N(1000))
			in = append(in, l)
		} else {
			k := rng.IntN(len(in))
			l := in[k]
			if got := h.remove(int(l.hidx)); got != l {
				t.Fatalf("step %d: remove(%d) took another lock", step, l.hidx)
			}
			in[k] = in[len(in)-1]
			in = in[:len(in)-1]
		}
		if step%97 == 0 {
			checkHeap(t, h)
		}
	}
	checkHeap(t, h)
	if len(h) != len(in) {
		t.Fatalf("heap holds %d locks, want %d", len(h), len(in))
	}
	big := cap(h)
	last := int64(-1)
	for len(h) > 0 {
		at := h[0].at
		h.remove(0)
		if at < last {
			t.Fatalf("due %d came after %d", at, last)
		}
		last = at
	}
	if cap(h) > 2048 || cap(h) >= big {
		t.Errorf("capacity %d after emptying a heap of capacity %d", cap(h), big)
	}
}

// renewOK is a strategy whose extensions all succeed at once; nothing
// else is called.
type renewOK struct{ driver.Strategy }

func (s renewOK) ExtendMany(_ context.Context, locks []driver.HeldKey, ttl time.Duration) []driver.ExtendResult {
	out := make([]driver.ExtendResult, len(locks))
	for i := range out {
		out[i].Lease = driver.Lease{Until: time.Now().Add(ttl)}
	}
	return out
}

func (s renewOK) Acquire(_ context.Context, _, _ string, ttl time.Duration) (driver.Lease, error) {
	return driver.Lease{Until: time.Now().Add(ttl)}, nil
}

func (s renewOK) Release(context.Context, string, string) error { return nil }

// Adding a lock wakes the renewer's loop only when it is due before the
// loop would look anyway: a Manager taking many locks does not make its
// loop run once per lock.
func TestRenewerWakesOnlyForEarlierLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Minute
		m, err := New(renewOK{}, WithTTL(ttl), WithAutoRenew(0.5, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		r := m.renewer
		hold := func(start time.Time) *Lock {
			l := newLock(m, "k", "t", start, driver.Lease{Until: start.Add(ttl)})
			r.add(l)
			return l
		}
		var locks []*Lock
		locks = append(locks, hold(time.Now())) // starts the loop
		synctest.Wait()                         // which sleeps until that lock is due
		for range 100 {
			time.Sleep(10 * time.Millisecond)
			locks = append(locks, hold(time.Now()))
		}
		r.mu.Lock()
		wakes := r.addWakes
		r.mu.Unlock()
		if wakes != 0 {
			t.Errorf("%d adds of later locks woke the loop", wakes)
		}
		locks = append(locks, hold(time.Now().Add(-ttl/4))) // due before the first
		r.mu.Lock()
		wakes = r.addWakes
		r.mu.Unlock()
		if wakes != 1 {
			t.Errorf("an earlier lock woke the loop %d times, want 1", wakes)
		}
		time.Sleep(ttl) // every lock renewed at least once
		for i, l := range locks {
			if err := l.Context().Err(); err != nil {
				t.Errorf("lock %d: %v", i, context.Cause(l.Context()))
			}
			r.remove(l)
		}
		time.Sleep(ttl) // the loop ends
	})
}

// BenchmarkHeldLockUnlock is TryLock and Unlock of a Manager with
// auto-renewal over a strategy that answers at once, while the Manager
// holds held other locks: its cost stays flat as held grows.
func BenchmarkHeldLockUnlock(b *testing.B) {
	for _, held := range []int{1000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			m, err := New(renewOK{}, WithTTL(time.Hour), WithAutoRenew(0.5, 2*time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			locks := make([]*Lock, held)
			for i := range locks {
				if locks[i], err = m.TryLock(ctx, "held:"+strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := m.TryLock(ctx, "pair")
					if err == nil {
						err = l.Unlock(ctx)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			for _, l := range locks {
				_ = l.Unlock(ctx)
			}
		})
	}
}
