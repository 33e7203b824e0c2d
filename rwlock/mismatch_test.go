package rwlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/rwlock"
)

// A read-write lock used with 4 readers refuses a reader and a writer with
// 3, at once (a permanent error matching ErrMismatch), and leaves the gate
// free for the users of 4.
func TestMismatchedReadersRefused(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		four, err := rwlock.New(vtest.Manager(t, srv.Node()), "doc", 4)
		require.NoError(t, err)
		r, err := four.RLock(ctx)
		require.NoError(t, err)

		three, err := rwlock.New(vtest.Manager(t, srv.Node()), "doc", 3)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err = three.RLock(wctx)
		require.ErrorIs(t, err, rwlock.ErrMismatch)
		assert.True(t, dlm.Permanent(err), "%v", err)
		_, err = three.Lock(wctx)
		require.ErrorIs(t, err, rwlock.ErrMismatch)
		assert.True(t, dlm.Permanent(err), "%v", err)
		assert.NoError(t, wctx.Err(), "waited for the mismatch to go away")

		gate, err := vtest.Manager(t, srv.Node()).TryLock(ctx, "doc:gate")
		require.NoError(t, err, "the refused reader left the gate held")
		require.NoError(t, gate.Unlock(ctx))
		require.NoError(t, r.Unlock(ctx))
		w, err := four.Lock(wctx)
		require.NoError(t, err)
		require.NoError(t, w.Unlock(ctx))
	})
}
