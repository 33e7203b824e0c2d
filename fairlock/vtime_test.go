package fairlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
)

// poll is the waiters' retry delay in these tests: a waiter woken by
// polling is woken this long after the release it missed.
const poll = 2 * time.Second

// vfair returns the FairLock on key of a new Manager on n (a client of its
// own, as another process's), polling at most every poll.
func vfair(t *testing.T, n *dlmtest.Node, key string, opts ...dlm.Option) *FairLock {
	t.Helper()
	f, err := New(vtest.Manager(t, n, append([]dlm.Option{dlm.WithRetryDelay(time.Millisecond, poll)}, opts...)...), key)
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

// lockAsync takes f's lock in a goroutine; the channel receives the lock,
// or is closed when Lock failed.
func lockAsync(t *testing.T, ctx context.Context, f *FairLock) <-chan *dlm.Lock {
	got := make(chan *dlm.Lock, 1)
	go func() {
		l, err := f.Lock(ctx)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- l
	}()
	return got
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
		got1 := lockAsync(t, ctx, w1)
		require.EqualValues(t, 1, queued(t, srv, x))
		slow.SetDelay(10 * time.Millisecond) // w2 queues while w1 takes the lock
		got2 := lockAsync(t, ctx, w2)
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
		require.Less(t, woken, poll/10, "the waiter behind the head learned of the release by polling (its poll: %v)", poll)
		require.NoError(t, l2.Unlock(ctx))
	})
}
