package multilock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/multilock"
	"github.com/dlmgo/dlm/strategy"
)

// A refused TryLock and a Lock whose context ends have given back the keys
// they took when they return: one attempt takes them at once.
func TestGivenBackBeforeReturn(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr})
	t.Cleanup(func() { _ = c.Close() })
	s, err := strategy.NewSingle(goredis.New(c))
	require.NoError(t, err)
	m, err := dlm.New(s, dlm.WithTTL(10*time.Second))
	require.NoError(t, err)
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
}
