package strategy_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	redigolib "github.com/gomodule/redigo/redis"
	"github.com/redis/go-redis/v9"
	rueidislib "github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/driver/redigo"
	"github.com/dlmgo/dlm/driver/rueidis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// Two nodes that reach one server under different names make no quorum:
// Redlock finds them at first use, for every driver and client kind, and
// Lock gives up at once. The per-node timeout is long here so that the
// probe at first use is answered even by a cold cluster client on a loaded
// machine (it must load the slot map first); a probe that times out is
// TestRedlockCountsNoServerTwiceBeforeItKnows's case.
func TestRedlockRefusesOneServerTwice(t *testing.T) {
	srvs := redistest.StartN(t, 2)
	cluster := redistest.StartCluster(t, 3)
	other := func(t *testing.T) driver.Node { return goredis.New(ctxClient(t, srvs[1].Addr)) }
	byName := "localhost:" + strconv.Itoa(srvs[0].Port) // the same server as srvs[0].Addr
	goredisNode := func(t *testing.T, addr string) driver.Node { return goredis.New(ctxClient(t, addr)) }
	redigoNode := func(t *testing.T, addr string) driver.Node {
		p := &redigolib.Pool{MaxIdle: 4, Dial: func() (redigolib.Conn, error) { return redigolib.Dial("tcp", addr) }}
		t.Cleanup(func() { _ = p.Close() })
		return redigo.New(p).WithName(addr)
	}
	rueidisNode := func(t *testing.T, addr string) driver.Node {
		c, err := rueidislib.NewClient(rueidislib.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return rueidis.New(c)
	}
	clusterClient := func(t *testing.T, i int) driver.Node {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cluster[i].Addr}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	}
	for _, tc := range []struct {
		name string
		same func(t *testing.T) (a, b driver.Node)
	}{
		{"go-redis clients", func(t *testing.T) (driver.Node, driver.Node) {
			return goredisNode(t, srvs[0].Addr), goredisNode(t, byName)
		}},
		{"redigo pools", func(t *testing.T) (driver.Node, driver.Node) {
			return redigoNode(t, srvs[0].Addr), redigoNode(t, byName)
		}},
		{"rueidis clients", func(t *testing.T) (driver.Node, driver.Node) {
			return rueidisNode(t, srvs[0].Addr), rueidisNode(t, byName)
		}},
		{"go-redis cluster clients of one cluster", func(t *testing.T) (driver.Node, driver.Node) {
			return clusterClient(t, 0), clusterClient(t, 1)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.same(t)
			r, err := strategy.NewRedlock([]driver.Node{a, b, other(t)}, strategy.WithTimeout(3*time.Second))
			require.NoError(t, err, "the names differ: found only by asking the servers")
			m, err := dlm.New(r)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			_, err = m.Lock(ctx, "twice")
			assert.ErrorIs(t, err, dlm.ErrInvalid)
			assert.ErrorContains(t, err, "reach the same Redis server")
			assert.Less(t, time.Since(start), 10*time.Second, "refused at once, not retried until the deadline")
			_, err = r.Acquire(context.Background(), "twice", "tok", time.Second)
			assert.ErrorIs(t, err, dlm.ErrInvalid, "and on every later call")
		})
	}

	t.Run("distinct servers", func(t *testing.T) {
		third := redistest.Start(t)
		r, err := strategy.NewRedlock([]driver.Node{goredisNode(t, srvs[0].Addr), other(t), goredisNode(t, third.Addr)})
		require.NoError(t, err)
		_, err = r.Acquire(context.Background(), "distinct", "tok", time.Second)
		assert.NoError(t, err)
	})
}

// failFirst is a node whose first call (the server-identity probe at first
// use) fails as a reset connection does.
type failFirst struct {
	driver.Node
	first atomic.Bool
}

func (n *failFirst) Run(ctx context.Context, calls []driver.Call) {
	if n.first.CompareAndSwap(false, true) {
		for i := range calls {
			calls[i].Err = errors.New("connection reset by peer (failFirst)")
		}
		return
	}
	n.Node.Run(ctx, calls)
}

// One server reached under two names makes no quorum even before Redlock
// knows it: when the probe at first use timed out on a node, its grant
// counts only once its server is known, and it is asked again then (the
// probe at first use failed on it: a reset connection, or a timeout on a
// loaded machine, as in CI once). Here
// the two names of one server grant and the third node refuses: the
// acquisition must fail (the server was counted twice before).
func TestRedlockCountsNoServerTwiceBeforeItKnows(t *testing.T) {
	srvs := redistest.StartN(t, 2)
	ctx := context.Background()
	third := goredis.New(ctxClient(t, srvs[1].Addr))
	other, err := strategy.NewSingle(third)
	require.NoError(t, err)
	_, err = other.Acquire(ctx, "window", "other", time.Minute)
	require.NoError(t, err)
	a := goredis.New(ctxClient(t, srvs[0].Addr))
	b := &failFirst{Node: goredis.New(ctxClient(t, "localhost:"+strconv.Itoa(srvs[0].Port)))}
	// A per-node timeout a loaded machine does not reach: the adaptive
	// one, from 50ms, timed the other name out too once under two busy
	// loops, and the attempt gave up before it could find out.
	r, err := strategy.NewRedlock([]driver.Node{a, b, third}, strategy.WithTimeout(3*time.Second))
	require.NoError(t, err)
	_, err = r.Acquire(ctx, "window", "tok", time.Minute)
	require.Error(t, err, "one server, granting under two names, made a quorum")
	assert.ErrorIs(t, err, dlm.ErrInvalid, "the node that granted was asked again, and found out")
	lock, _ := strategy.Keys("window")
	assert.Equal(t, int64(0), srvs[0].Client(t).Exists(ctx, lock).Val(), "the grants were undone")
}
