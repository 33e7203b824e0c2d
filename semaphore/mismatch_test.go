package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/semaphore"
)

// A semaphore used with 2 permits refuses a user with 3, with a permanent
// error matching ErrMismatch, before it takes any permit; users with 2
// permits, in any process, go on.
func TestMismatchedPermitsRefused(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		two, err := semaphore.New(vtest.Manager(t, srv.Node()), "jobs", 2)
		require.NoError(t, err)
		a, err := two.TryAcquire(ctx)
		require.NoError(t, err)
		b, err := two.TryAcquire(ctx)
		require.NoError(t, err)

		three, err := semaphore.New(vtest.Manager(t, srv.Node()), "jobs", 3)
		require.NoError(t, err)
		_, err = three.TryAcquire(ctx)
		require.ErrorIs(t, err, semaphore.ErrMismatch)
		assert.True(t, dlm.Permanent(err), "%v", err)
		assert.Contains(t, err.Error(), "3 here, 2 recorded")
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err = three.Acquire(wctx)
		require.ErrorIs(t, err, semaphore.ErrMismatch)
		assert.NoError(t, wctx.Err(), "Acquire waited for the mismatch to go away")
		for i := range 3 {
			l, err := vtest.Manager(t, srv.Node()).TryLock(ctx, semaphore.PermitKey("jobs", i))
			if i < 2 {
				require.ErrorIs(t, err, dlm.ErrNotAcquired, "permit %d is held by the users of 2", i)
				continue
			}
			require.NoError(t, err, "the refused user took permit 2")
			require.NoError(t, l.Unlock(ctx))
		}

		require.NoError(t, a.Unlock(ctx))
		again, err := semaphore.New(vtest.Manager(t, srv.Node()), "jobs", 2) // another process of 2
		require.NoError(t, err)
		c, err := again.TryAcquire(ctx)
		require.NoError(t, err)
		require.NoError(t, c.Unlock(ctx))
		require.NoError(t, b.Unlock(ctx))
		_, err = three.TryAcquire(ctx)
		require.ErrorIs(t, err, semaphore.ErrMismatch, "the number stays recorded while no permit is held")
	})
}
