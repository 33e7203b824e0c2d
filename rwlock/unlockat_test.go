package rwlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
)

// A writer's UnlockAt keeps readers and writers out until at; a reader's
// keeps writers out until then, not other readers.
func TestHoldUnlockAt(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		w, err := vrw(t, srv, "doc").Lock(ctx)
		require.NoError(t, err)
		at := time.Now().Add(time.Second)
		require.NoError(t, w.UnlockAt(ctx, at))
		require.ErrorIs(t, context.Cause(w.Context()), dlm.ErrUnlocked)
		other := vrw(t, srv, "doc")
		bounded := func(d time.Duration) context.Context {
			c, cancel := context.WithTimeout(ctx, d)
			t.Cleanup(cancel)
			return c
		}
		_, err = other.RLock(bounded(time.Until(at) - time.Millisecond))
		require.ErrorIs(t, err, dlm.ErrNotAcquired, "a reader before the writer's at")
		time.Sleep(time.Until(at))
		r, err := other.RLock(bounded(vtest.Poll))
		require.NoError(t, err, "a reader at at")
		require.Greater(t, r.Fence(), w.Fence())

		at = time.Now().Add(time.Second)
		require.NoError(t, r.UnlockAt(ctx, at))
		r2, err := other.RLock(bounded(vtest.Poll))
		require.NoError(t, err, "another reader while the first reader's permit is kept")
		require.NoError(t, r2.Unlock(ctx))
		_, err = other.Lock(bounded(time.Until(at) - time.Millisecond))
		require.ErrorIs(t, err, dlm.ErrNotAcquired, "a writer before the reader's at")
		w2, err := other.Lock(bounded(vtest.Poll + time.Second))
		require.NoError(t, err, "a writer after the reader's at")
		require.NoError(t, w2.Unlock(ctx))
	})
}
