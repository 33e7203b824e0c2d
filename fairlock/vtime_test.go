package fairlock

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/strategy"
)

// vfair returns the FairLock on key of a new Manager on n (a client of its
// own, as another process's), polling at most every vtest.Poll.
func vfair(t *testing.T, n *dlmtest.Node, key string, opts ...dlm.Option) *FairLock {
	t.Helper()
	f, err := New(vtest.Manager(t, n, opts...), key)
	require.NoError(t, err)
	return f
}

// queued is the number of waiters in f's queue once every goroutine of the
// bubble is blocked.
func queued(t *testing.T, srv *dlmtest.Server, f *FairLock) int64 {
	t.Helper()
	synctest.Wait()
	n, err := srv.Do("ZCARD", f.keys[0])
	require.NoError(t, err)
	return n.(int64)
}

// TestReleaseWakesWaiterBehindHead: a waiter that queued behind the head
// while the head took the lock (so it never tried the lock itself) is woken
// by the head's release, not by its next poll.
func TestReleaseWakesWaiterBehindHead(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		x := vfair(t, srv.Node(), "k")
		slow := srv.Node()
		w1, w2 := vfair(t, slow, "k"), vfair(t, srv.Node(), "k")
		held, err := x.TryLock(ctx)
		require.NoError(t, err)
		got1 := vtest.Async(t, func() (*dlm.Lock, error) { return w1.Lock(ctx) })
		require.EqualValues(t, 1, queued(t, srv, x))
		slow.SetDelay(10 * time.Millisecond) // w2 queues while w1 takes the lock
		got2 := vtest.Async(t, func() (*dlm.Lock, error) { return w2.Lock(ctx) })
		require.EqualValues(t, 2, queued(t, srv, x))

		require.NoError(t, held.Unlock(ctx))
		l1, ok := <-got1
		require.True(t, ok)
		released := time.Now()
		require.NoError(t, l1.Unlock(ctx))
		l2, ok := <-got2
		require.True(t, ok)
		woken := time.Since(released)
		require.Greater(t, l2.Fence(), l1.Fence())
		require.Less(t, woken, vtest.Poll/10, "the waiter behind the head learned of the release by polling (its poll: %v)", vtest.Poll)
		require.NoError(t, l2.Unlock(ctx))
	})
}

// A vgrant is one acquisition in virtual time.
type vgrant struct {
	arrival, fence       uint64
	asked, got, released time.Time
}

// TestArrivalOrder: 16 Managers (clients of their own) take one key 12
// times each; grants follow arrival order exactly, never overlap, and each
// hand-off follows the release at once: no waiter waits for a poll.
func TestArrivalOrder(t *testing.T) {
	const clients, rounds, hold = 16, 12, 5 * time.Millisecond
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		grants := make(chan vgrant, clients*rounds)
		var wg sync.WaitGroup
		for range clients {
			f := vfair(t, srv.Node(), "fair16")
			wg.Go(func() {
				for range rounds {
					g := vgrant{asked: time.Now()}
					l, arrival, err := f.lock(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					g.got, g.arrival, g.fence = time.Now(), arrival, l.Fence()
					time.Sleep(hold)
					g.released = time.Now()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
					grants <- g
				}
			})
		}
		wg.Wait()
		close(grants)
		var all []vgrant
		for g := range grants {
			all = append(all, g)
		}
		require.Len(t, all, clients*rounds)
		slices.SortFunc(all, func(a, b vgrant) int { return cmp.Compare(a.fence, b.fence) })
		var longest time.Duration
		for i, b := range all {
			longest = max(longest, b.got.Sub(b.asked))
			if i == 0 {
				continue
			}
			a := all[i-1]
			require.NotEqual(t, a.fence, b.fence, "fence granted twice")
			require.Greater(t, b.arrival, a.arrival, "grant %d (fence %d) out of arrival order", i, b.fence)
			require.False(t, b.got.Before(a.released), "fence %d granted before fence %d was released", b.fence, a.fence)
			require.Less(t, b.got.Sub(a.released), vtest.Poll/10, "fence %d granted %v after fence %d's release: a waiter polled", b.fence, b.got.Sub(a.released), a.fence)
		}
		// Each waits for the others' turns, in a queue of every client.
		require.LessOrEqual(t, longest, clients*hold+vtest.Poll/10)
	})
}

// TestKilledWaiterDelaysQueueByItsLease: a waiter at the head of the queue
// that dies (its client cut off: no call reaches the server) holds the
// next waiter back for at most its lease.
func TestKilledWaiterDelaysQueueByItsLease(t *testing.T) {
	const lease = time.Second
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		f := vfair(t, srv.Node(), "dead", dlm.WithTTL(lease))
		holder, err := f.TryLock(ctx)
		require.NoError(t, err)

		dead := srv.Node()
		dctx, kill := context.WithCancel(ctx)
		defer kill()
		dying := vfair(t, dead, "dead", dlm.WithTTL(lease))
		go func() { _, _ = dying.Lock(dctx) }()
		require.EqualValues(t, 1, queued(t, srv, f))
		dead.Partition(true) // the waiter's place is renewed no more
		died := time.Now()

		got := vtest.Async(t, func() (*dlm.Lock, error) { return f.Lock(ctx) })
		require.EqualValues(t, 2, queued(t, srv, f))
		require.NoError(t, holder.Unlock(ctx))
		l, ok := <-got
		require.True(t, ok)
		require.LessOrEqual(t, time.Since(died), lease+10*time.Millisecond, "the dead waiter held the queue back longer than its lease")
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestCancelledWaiterLeaves: a waiter whose context ends leaves the queue
// at once, and its error says why; the next waiter gets the key at the
// release.
func TestCancelledWaiterLeaves(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		f := vfair(t, srv.Node(), "cancel")
		holder, err := f.TryLock(ctx)
		require.NoError(t, err)

		cctx, cancel := context.WithCancel(ctx)
		gaveUp := make(chan error, 1)
		quitter := vfair(t, srv.Node(), "cancel")
		go func() { _, err := quitter.Lock(cctx); gaveUp <- err }()
		require.EqualValues(t, 1, queued(t, srv, f))
		cancel()
		err = <-gaveUp
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		require.ErrorIs(t, err, context.Canceled)
		require.Zero(t, queued(t, srv, f), "the waiter that gave up is still queued")

		_, err = f.TryLock(ctx) // held, though nobody waits
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		next := vfair(t, srv.Node(), "cancel")
		got := vtest.Async(t, func() (*dlm.Lock, error) { return next.Lock(ctx) })
		require.EqualValues(t, 1, queued(t, srv, f))
		released := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		l, ok := <-got
		require.True(t, ok)
		require.Less(t, time.Since(released), vtest.Poll/10, "granted long after the release")
		require.NoError(t, l.Unlock(ctx))
		require.Zero(t, queued(t, srv, f), "waiters left in the queue")
	})
}

// TestOverFailover: the queue lives on the primary, and the lock is the
// failover strategy's (granted once a replica acknowledged it).
func TestOverFailover(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		fo, err := strategy.NewFailover(srv.Node())
		require.NoError(t, err)
		f, err := New(vtest.Over(t, fo), "over-failover")
		require.NoError(t, err)
		ctx := context.Background()
		first, err := f.Lock(ctx)
		require.NoError(t, err)
		got := vtest.Async(t, func() (*dlm.Lock, error) { return f.Lock(ctx) })
		require.EqualValues(t, 1, queued(t, srv, f))
		require.NoError(t, first.Unlock(ctx))
		l, ok := <-got
		require.True(t, ok)
		require.Greater(t, l.Fence(), first.Fence())
		require.NoError(t, l.Unlock(ctx))
	}, dlmtest.WithReplicas(1))
}

// TestPermanentErrorEndsWait: a queue key holding another type (WRONGTYPE,
// a permanent error) ends Lock at once instead of waiting.
func TestPermanentErrorEndsWait(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		f := vfair(t, srv.Node(), "k")
		_, err := srv.Do("SET", f.keys[0], "not a queue")
		require.NoError(t, err)
		start := time.Now()
		_, err = f.Lock(context.Background())
		require.True(t, dlm.Permanent(err), "%v", err)
		require.Zero(t, time.Since(start), "Lock waited on a permanent error")
	})
}

// lostLeave is a node on which the queue script's leave step gets no
// reply: it fails when its context ends.
type lostLeave struct{ driver.Node }

func (n lostLeave) Run(ctx context.Context, calls []driver.Call) {
	for _, c := range calls {
		if len(c.Args) == 3 && c.Args[2] == "l" {
			<-ctx.Done()
			for i := range calls {
				calls[i].Err = ctx.Err()
			}
			return
		}
	}
	n.Node.Run(ctx, calls)
}

// TestLockReturnsWhileValid: when the reply to leaving the queue after the
// grant is lost, Lock still returns the lock while it is valid, and leaves
// the queue in the background (soak seed 10100714594469904762 of the
// simulator: Lock returned 2s after the lock's validity had ended).
func TestLockReturnsWhileValid(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		s, err := strategy.NewSingle(lostLeave{srv.Node()})
		require.NoError(t, err)
		f, err := New(vtest.Over(t, s), "k")
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 3*vtest.TTL)
		defer cancel()
		l, err := f.Lock(ctx)
		require.NoError(t, err)
		require.True(t, time.Now().Before(l.Until()), "Lock returned at %v a lock valid until %v", time.Now(), l.Until())
		require.NoError(t, l.Context().Err())
		require.NoError(t, l.Unlock(context.Background()))
	})
}
