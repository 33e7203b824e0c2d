package strategy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/inspect"
	"github.com/dlmgo/dlm/strategy"
)

// Inspect and Revoke over Redlock with masters down: a frozen minority is
// reported per node and the majority decides; with every master frozen
// Inspect fails and Revoke says the state is unknown, within the per-node
// timeout.
func TestRedlockInspectWithNodesDown(t *testing.T) {
	c := startCluster(t, 3)
	r := c.redlock(t, strategy.WithTimeout(200*time.Millisecond))
	m, err := dlm.New(r, dlm.WithOwner("inspected"), dlm.WithTTL(10*time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	l, err := m.TryLock(ctx, "job")
	require.NoError(t, err)

	c.freeze(t, 0)
	info, err := inspect.Key(ctx, r, "job")
	require.NoError(t, err)
	assert.True(t, info.Held, "2 of 3 masters hold it")
	assert.Equal(t, "inspected", info.Holder.Owner)
	assert.Error(t, info.Nodes[0].Err, "the frozen master")
	assert.Equal(t, l.Token(), info.Nodes[1].Token)

	for i := 1; i < 3; i++ {
		c.freeze(t, i)
	}
	start := time.Now()
	_, err = inspect.Key(ctx, r, "job")
	assert.ErrorContains(t, err, "no node answered")
	_, err = inspect.Revoke(ctx, r, "job", "ops", "test")
	assert.ErrorIs(t, err, dlm.ErrStateUnknown, "no majority answered: held or not is unknown")
	assert.NotErrorIs(t, err, dlm.ErrNotHeld)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "each frozen node's timeout is in the error")
	assert.Less(t, time.Since(start), 2*time.Second, "bounded by the per-node timeout")
	for i := range 3 {
		c.thaw(t, i)
	}
	assert.True(t, c.holdsAll(t, "job", l.Token()), "a failed revocation changed nothing")

	// Bad input is refused before any node is asked.
	for _, bad := range [][2]string{{"ops", "two\nlines"}, {"ops", strings.Repeat("x", inspect.MaxRevokeReasonLen+1)}, {"a\nb", "why"}} {
		_, err = inspect.Revoke(ctx, r, "job", bad[0], bad[1])
		assert.ErrorIs(t, err, dlm.ErrInvalid, "%q", bad)
	}
	_, err = inspect.Key(ctx, r, "")
	assert.ErrorIs(t, err, dlm.ErrInvalid)
}

// KeyOf inverts the lock names of every kind of key, and refuses names
// that are not a lock's.
func TestKeyOf(t *testing.T) {
	for _, key := range []string{"orders:42", "{user1}:cart", "odd}key", "a.b", "x:revoked"} {
		lock, _ := strategy.Keys(key)
		got, ok := strategy.KeyOf(lock)
		assert.True(t, ok, key)
		assert.Equal(t, key, got)
	}
	for _, name := range []string{"dlm:fence:{abc}", "dlm:{orders}:fence", "dlm:{orders}:revoked", "other", "dlm:x:{zz}", "dlm:{}"} {
		_, ok := strategy.KeyOf(name)
		assert.False(t, ok, name)
	}
}
