package multilock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/internal/vtest"
	"github.com/dlmgo/dlm/multilock"
)

// UnlockAt ends the Set at once and keeps every key from others until at.
func TestSetUnlockAt(t *testing.T) {
	vtest.Run(t, func(t *testing.T, srv *dlmtest.Server) {
		ctx := context.Background()
		set, err := multilock.TryLock(ctx, vtest.Manager(t, srv.Node()), "a", "b")
		require.NoError(t, err)
		other := vtest.Manager(t, srv.Node())
		at := time.Now().Add(time.Second)
		require.NoError(t, set.UnlockAt(ctx, at))
		require.ErrorIs(t, context.Cause(set.Context()), dlm.ErrUnlocked)
		for _, key := range []string{"a", "b"} {
			_, err := other.TryLock(ctx, key)
			require.ErrorIs(t, err, dlm.ErrNotAcquired, "%s before at", key)
		}
		time.Sleep(time.Until(at))
		_, err = multilock.TryLock(ctx, other, "a", "b")
		require.NoError(t, err, "at at")
	})
}
