package goredis_test

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
	"github.com/dlmgo/dlm/strategy"
)

// lockCycle takes, extends and releases a lock through n, twice, and checks
// the fence advanced.
func lockCycle(t *testing.T, n dlm.Node, key string) {
	t.Helper()
	s, err := strategy.NewSingle(n)
	require.NoError(t, err)
	m, err := dlm.New(s, dlm.WithTTL(time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	var last uint64
	for range 2 {
		l, err := m.TryLock(ctx, key)
		require.NoError(t, err)
		assert.Greater(t, l.Fence(), last)
		last = l.Fence()
		_, err = m.TryLock(ctx, key)
		assert.ErrorIs(t, err, dlm.ErrNotAcquired)
		require.NoError(t, l.Extend(ctx, time.Second))
		require.NoError(t, l.Unlock(ctx))
	}
}

func TestClient(t *testing.T) {
	c := redistest.Start(t).Client(t)
	lockCycle(t, goredis.New(c), "plain")
}

func TestClusterClient(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	defer c.Close()
	// Keys spread over all three masters; each lock and its fence share a slot.
	for _, k := range []string{"a", "b", "c", "orders:42", "x{y}z"} {
		lockCycle(t, goredis.New(c), k)
	}
}

func TestFailoverClient(t *testing.T) {
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "mymaster", primary, 1, time.Second)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr}})
	defer c.Close()
	lockCycle(t, goredis.New(c), "sentinel")
}

func TestNoScriptIsMapped(t *testing.T) {
	c := redistest.Start(t).Client(t)
	n := goredis.New(c)
	ctx := context.Background()
	sc := dlm.NewScript("return {1, -2, 9007199254740992}")
	_, err := n.EvalSHA(ctx, sc.SHA1(), nil)
	require.ErrorIs(t, err, dlm.ErrNoScript)
	r, err := sc.Run(ctx, n, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, -2, 9007199254740992}, r, "integers kept exact up to 2^53 (Lua numbers are doubles), negative too")
	r, err = n.EvalSHA(ctx, sc.SHA1(), nil)
	require.NoError(t, err, "cached after EVAL")
	assert.Len(t, r, 3)
}

func TestRepliesOtherThanIntegerArraysAreErrors(t *testing.T) {
	c := redistest.Start(t).Client(t)
	n := goredis.New(c)
	for _, src := range []string{"return 'x'", "return 1", "return nil", "return {1, 'x'}", "return redis.error_reply('boom')"} {
		_, err := n.Eval(context.Background(), src, nil)
		assert.Error(t, err, src)
	}
}

// A frozen server never answers; without ContextTimeoutEnabled go-redis
// would wait for its 3s ReadTimeout, but the Node returns at the deadline.
func TestDeadlineIsEnforcedWithoutContextTimeoutEnabled(t *testing.T) {
	for _, ctxOnWire := range []bool{false, true} {
		srv := redistest.Start(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 30 * time.Second, ContextTimeoutEnabled: ctxOnWire})
		defer c.Close()
		n := goredis.New(c)
		require.NoError(t, c.Ping(context.Background()).Err())
		srv.Freeze(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, err := n.Eval(ctx, "return {1}", nil)
		elapsed := time.Since(start)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "ContextTimeoutEnabled=%v", ctxOnWire)
		assert.Less(t, elapsed, 2*time.Second, "ContextTimeoutEnabled=%v", ctxOnWire)
		srv.Thaw(t)
	}
}
