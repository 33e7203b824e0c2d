package multilock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/multilock"
)

// A refused TryLock and a Lock whose context ends have given back the keys
// they took when they return: one attempt takes them at once.
func TestGivenBackBeforeReturn(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		m := vtest.Manager(t, srv.Node())
		ctx := context.Background()

		b, err := m.TryLock(ctx, "b")
		require.NoError(t, err)
		_, err = multilock.TryLock(ctx, m, "a", "b")
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		a, err := m.TryLock(ctx, "a")
		require.NoError(t, err, "a was not given back")
		require.NoError(t, a.Unlock(ctx))

		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = multilock.Lock(short, m, "a", "b")
		require.ErrorIs(t, err, dlm.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		a, err = m.TryLock(ctx, "a")
		require.NoError(t, err, "a was not given back")
		require.NoError(t, a.Unlock(ctx))
		require.NoError(t, b.Unlock(ctx))
	})
}

// TestReleaseWakesWaiter: a set waiting for a key another client holds
// gets in at that key's release, not at its next poll, and never shares
// a key with the holder.
func TestReleaseWakesWaiter(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		b, err := vtest.Manager(t, srv.Node()).TryLock(ctx, "b")
		require.NoError(t, err)
		m := vtest.Manager(t, srv.Node())
		got := vtest.Async(t, func() (*multilock.Set, error) { return multilock.Lock(ctx, m, "c", "b", "a") })
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("the set took b while another client held it")
		default:
		}
		released := time.Now()
		require.NoError(t, b.Unlock(ctx))
		s, ok := <-got
		require.True(t, ok)
		require.Less(t, time.Since(released), vtest.Poll/10, "the set learned of b's release by polling")
		require.Equal(t, []string{"a", "b", "c"}, s.Keys())
		require.Greater(t, s.Fence("b"), b.Fence())
		require.NoError(t, s.Unlock(ctx))
	})
}
