package semaphore_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/semaphore"
	"github.com/dlmgo/dlm/strategy"
)

// vsem returns the semaphore name of permits of a new Manager on a new
// Node of srv (a client of its own, as another process's).
func vsem(t *testing.T, srv *dlmtest.Server, name string, permits int, opts ...dlm.Option) *semaphore.Semaphore {
	t.Helper()
	s, err := semaphore.New(vtest.Manager(t, srv.Node(), opts...), name, permits)
	require.NoError(t, err)
	return s
}

// TestReleaseWakesWaiter: a waiter of another client, with every permit
// held, gets the permit given back at its release, not at its next poll.
func TestReleaseWakesWaiter(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		holders := vsem(t, srv, "jobs", 2)
		a, err := holders.TryAcquire(ctx)
		require.NoError(t, err)
		b, err := holders.TryAcquire(ctx)
		require.NoError(t, err)

		waiter := vsem(t, srv, "jobs", 2)
		got := vtest.Async(t, func() (*dlm.Lock, error) { return waiter.Acquire(ctx) })
		synctest.Wait() // the waiter has tried, subscribed and waits
		released := time.Now()
		require.NoError(t, b.Unlock(ctx))
		p, ok := <-got
		require.True(t, ok)
		require.Less(t, time.Since(released), vtest.Poll/10, "the waiter learned of the release by polling")
		require.Equal(t, b.Key(), p.Key())
		require.Greater(t, p.Fence(), b.Fence())
		require.NoError(t, p.Unlock(ctx))
		require.NoError(t, a.Unlock(ctx))
	})
}

// TestLapsedPermit: a holder that stops (no renewal, no release) keeps its
// permit until its lease ends, and a waiter gets it then: after the
// stopped holder's Context ended, within the lease.
func TestLapsedPermit(t *testing.T) {
	const lease = time.Second
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		stopped, err := vsem(t, srv, "jobs", 1, dlm.WithTTL(lease)).TryAcquire(ctx)
		require.NoError(t, err)
		taken, work := time.Now(), stopped.Context()
		p, err := vsem(t, srv, "jobs", 1, dlm.WithTTL(lease)).Acquire(ctx)
		require.NoError(t, err)
		select {
		case <-work.Done():
		default:
			t.Fatal("a waiter got the permit while its stopped holder's Context was live")
		}
		require.ErrorIs(t, context.Cause(work), dlm.ErrLost)
		require.LessOrEqual(t, time.Since(taken), lease+5*time.Millisecond, "the lapsed permit was granted late")
		require.Greater(t, p.Fence(), stopped.Fence())
		require.NoError(t, p.Unlock(ctx))
	})
}

// TestAcquireEndsWithContext: with every permit held, Acquire ends when its
// context does, with an error matching dlm.ErrNotAcquired and the
// context's, and takes nothing.
func TestAcquireEndsWithContext(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		held, err := vsem(t, srv, "jobs", 1).TryAcquire(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err = vsem(t, srv, "jobs", 1).Acquire(wctx)
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 3*time.Second, time.Since(start), "Acquire returned before or after its context ended")
		require.NoError(t, held.Unlock(ctx))
		p, err := vsem(t, srv, "jobs", 1).TryAcquire(ctx)
		require.NoError(t, err, "the waiter that gave up holds the permit")
		require.NoError(t, p.Unlock(ctx))
	})
}

// TestRenewedPermitUntilMaxHold: a permit of a Manager that renews is kept
// past its TTL, its Context live and its fence unchanged, until its
// maximum hold, when its Context ends (ErrMaxHold) and a waiter gets the
// permit within one TTL.
func TestRenewedPermitUntilMaxHold(t *testing.T) {
	const ttl, maxHold = time.Second, 5 * time.Second
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		p, err := vsem(t, srv, "jobs", 1, dlm.WithTTL(ttl), dlm.WithAutoRenew(0.5, maxHold)).TryAcquire(ctx)
		require.NoError(t, err)
		taken, work := time.Now(), p.Context()
		other := vsem(t, srv, "jobs", 1, dlm.WithTTL(ttl))
		time.Sleep(3 * ttl) // virtual: three leases
		require.NoError(t, work.Err(), "the renewed permit's Context ended")
		_, err = other.TryAcquire(ctx)
		require.ErrorIs(t, err, dlm.ErrNotAcquired, "the renewed permit was free")

		next, err := other.Acquire(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, context.Cause(work), dlm.ErrMaxHold)
		require.Greater(t, next.Fence(), p.Fence())
		require.LessOrEqual(t, time.Since(taken), maxHold+ttl+5*time.Millisecond, "granted later than one TTL after the holder's maximum hold")
		require.NoError(t, next.Unlock(ctx))
	})
}

// TestPermanentErrorEndsWait: a permit key holding another type (WRONGTYPE,
// a permanent error) ends Acquire at once instead of waiting.
func TestPermanentErrorEndsWait(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		sem := vsem(t, srv, "jobs", 1)
		lock, _ := strategy.Keys(semaphore.PermitKey("jobs", 0))
		_, err := srv.Do("HSET", lock, "f", "v")
		require.NoError(t, err)
		start := time.Now()
		_, err = sem.Acquire(context.Background())
		require.True(t, dlm.Permanent(err), "%v", err)
		require.Zero(t, time.Since(start), "Acquire waited on a permanent error")
	})
}
