package goredis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// lockCycle takes, extends and releases a lock through n, twice, and checks
// the fence advanced. Its TTL is a minute: the subject is the client's
// path to the server, not expiry, and with a TTL of 1s a loaded machine
// (-race, other tests) let the lease end between TryLock and Extend, which
// then failed with ErrNotHeld (TestClient's flake).
func lockCycle(t *testing.T, n driver.Node, key string) {
	t.Helper()
	s, err := strategy.NewSingle(n)
	require.NoError(t, err)
	m, err := dlm.New(s, dlm.WithTTL(time.Minute))
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
		require.NoError(t, l.Extend(ctx, time.Minute))
		require.NoError(t, l.Unlock(ctx))
	}
}

// run runs one call on n, as Run's single-call path does.
func run(ctx context.Context, n driver.Node, c driver.Call) ([]int64, error) {
	calls := []driver.Call{c}
	n.Run(ctx, calls)
	return calls[0].Reply, calls[0].Err
}

func TestClient(t *testing.T) {
	t.Parallel() // owns its servers
	srv := redistest.Start(t)
	n := goredis.New(srv.Client(t))
	assert.Equal(t, srv.Addr, fmt.Sprint(n), "named by its address")
	lockCycle(t, n, "plain")
}

// clusterClient: a node over a Cluster client is named after the
// addresses it was given, and locks keys on every master. Run by
// TestCluster.
func clusterClient(t *testing.T, nodes []*redistest.Server) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr, nodes[1].Addr}})
	defer c.Close()
	assert.Equal(t, "cluster("+nodes[0].Addr+","+nodes[1].Addr+")", fmt.Sprint(goredis.New(c)))
	// Keys spread over all three masters; each lock and its fence share a slot.
	for _, k := range []string{"a", "b", "c", "orders:42", "x{y}z"} {
		lockCycle(t, goredis.New(c), k)
	}
}

func TestFailoverClient(t *testing.T) {
	t.Parallel() // owns its servers
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, "mymaster", primary, 1, time.Second)
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: []string{sentinel.Addr}})
	defer c.Close()
	n := goredis.New(c)
	assert.NotContains(t, fmt.Sprint(n), "0x", "named by go-redis's address, not a pointer")
	lockCycle(t, n, "sentinel")
}

func TestNoScriptIsMapped(t *testing.T) {
	t.Parallel() // owns its servers
	c := redistest.Start(t).Client(t)
	n := goredis.New(c)
	ctx := context.Background()
	sc := eval.NewScript("return {1, -2, 9007199254740992}")
	_, err := run(ctx, n, driver.Call{SHA1: sc.SHA1()})
	require.ErrorIs(t, err, driver.ErrNoScript)
	r, err := sc.Run(ctx, n, nil)
	require.NoError(t, err)
	assert.Equal(t, []int64{1, -2, 9007199254740992}, r, "integers kept exact up to 2^53 (Lua numbers are doubles), negative too")
	r, err = run(ctx, n, driver.Call{SHA1: sc.SHA1()})
	require.NoError(t, err, "cached after EVAL")
	assert.Len(t, r, 3)
}

func TestRepliesOtherThanIntegersAreErrors(t *testing.T) {
	t.Parallel() // owns its servers
	c := redistest.Start(t).Client(t)
	n := goredis.New(c)
	for _, src := range []string{"return 'x'", "return nil", "return {1, 'x'}", "return redis.error_reply('boom')"} {
		_, err := run(context.Background(), n, driver.Call{Source: src})
		assert.Error(t, err, src)
	}
	r, err := run(context.Background(), n, driver.Call{Source: "return -9007199254740992"})
	require.NoError(t, err)
	assert.Equal(t, []int64{-9007199254740992}, r, "an integer n is []int64{n}")
}

// A frozen server never answers; without ContextTimeoutEnabled go-redis
// would wait for its ReadTimeout (a minute here), but the Node returns at
// the deadline. The bound is half the ReadTimeout, not a measure of the
// deadline's precision, which a loaded machine stretches.
func TestDeadlineIsEnforcedWithoutContextTimeoutEnabled(t *testing.T) {
	t.Parallel() // owns its servers
	for _, ctxOnWire := range []bool{false, true} {
		srv := redistest.Start(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, ContextTimeoutEnabled: ctxOnWire})
		defer c.Close()
		n := goredis.New(c)
		require.NoError(t, c.Ping(context.Background()).Err())
		srv.Freeze(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		_, err := run(ctx, n, driver.Call{Source: "return {1}"})
		elapsed := time.Since(start)
		cancel()
		assert.ErrorIs(t, err, context.DeadlineExceeded, "ContextTimeoutEnabled=%v", ctxOnWire)
		assert.Less(t, elapsed, 30*time.Second, "ContextTimeoutEnabled=%v: returned at the deadline, not at the ReadTimeout", ctxOnWire)
		srv.Thaw(t)
	}
}

// A call abandoned at its context's end finishes in the background once the
// server answers, and never writes into the caller's calls (-race checks
// that the caller may use them at once).
func TestAbandonedCallsAreNotWritten(t *testing.T) {
	t.Parallel() // owns its servers
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 30 * time.Second})
	defer c.Close()
	n := goredis.New(c)
	require.NoError(t, c.Ping(context.Background()).Err())
	for _, size := range []int{1, 3} {
		srv.Freeze(t)
		calls := make([]driver.Call, size)
		for i := range calls {
			calls[i] = driver.Call{Source: "return {redis.call('INCR', KEYS[1])}", Keys: []string{"abandoned"}}
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		n.Run(ctx, calls)
		srv.Thaw(t)
		for i := range calls {
			assert.ErrorIs(t, calls[i].Err, context.Canceled, "%d calls: call %d", size, i)
			calls[i].Reply = []int64{-1} // the caller owns calls again
		}
		require.Eventually(t, func() bool {
			v, _ := c.Get(context.Background(), "abandoned").Int()
			return v == size
		}, time.Minute, 10*time.Millisecond, "the abandoned commands ran once the server answered")
		require.NoError(t, c.Del(context.Background(), "abandoned").Err())
		for i := range calls {
			assert.Equal(t, []int64{-1}, calls[i].Reply, "%d calls: call %d untouched", size, i)
		}
	}
}
