package semaphore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/semaphore"
	"github.com/dlmgo/dlm/strategy"
)

// manager returns a Manager over a single real server at addr.
func manager(t *testing.T, addr string) *dlm.Manager {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
	require.NoError(t, err)
	return m
}

// A semaphore used with 2 permits refuses a user with 3, with a permanent
// error matching ErrMismatch, before it takes any permit; users with 2
// permits, in any process, go on.
func TestMismatchedPermitsRefused(t *testing.T) {
	addr := redistest.Start(t).Addr
	ctx := context.Background()
	two, err := semaphore.New(manager(t, addr), "jobs", 2)
	require.NoError(t, err)
	a, err := two.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := two.TryAcquire(ctx)
	require.NoError(t, err)

	three, err := semaphore.New(manager(t, addr), "jobs", 3)
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
		l, err := manager(t, addr).TryLock(ctx, semaphore.PermitKey("jobs", i))
		if i < 2 {
			require.ErrorIs(t, err, dlm.ErrNotAcquired, "permit %d is held by the users of 2", i)
			continue
		}
		require.NoError(t, err, "the refused user took permit 2")
		require.NoError(t, l.Unlock(ctx))
	}

	require.NoError(t, a.Unlock(ctx))
	again, err := semaphore.New(manager(t, addr), "jobs", 2) // another process of 2
	require.NoError(t, err)
	c, err := again.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	_, err = three.TryAcquire(ctx)
	require.ErrorIs(t, err, semaphore.ErrMismatch, "the number stays recorded while no permit is held")
}
