package strategy_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// slowSocketClient returns a go-redis client whose own socket timeouts are
// far longer than any per-node timeout, and that does not apply context
// deadlines to its sockets: only the strategy's per-node timeout can bound a
// call to a silent server.
func slowSocketClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:         addr,
		ReadTimeout:  30 * time.Second,
		WriteTimeout: 30 * time.Second,
		DialTimeout:  time.Second,
		MaxRetries:   -1, // a Node makes one round trip
		PoolSize:     64,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// cluster is N independent redis-server processes and what talks to them.
type cluster struct {
	servers []*redistest.Server
	clients []*redis.Client
	nodes   []driver.Node
	frozen  map[int]bool
}

// ctxClient returns a go-redis client that applies context deadlines to its
// sockets, so that a call abandoned at its deadline ends there too.
func ctxClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 64})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func startCluster(t testing.TB, n int, args ...string) *cluster {
	t.Helper()
	return startClusterWith(t, n, slowSocketClient, args...)
}

func startClusterWith(t testing.TB, n int, newClient func(testing.TB, string) *redis.Client, args ...string) *cluster {
	t.Helper()
	c := &cluster{servers: redistest.StartN(t, n, args...), frozen: map[int]bool{}}
	for _, s := range c.servers {
		cl := newClient(t, s.Addr)
		warmServer(t, cl)
		c.clients = append(c.clients, cl)
		c.nodes = append(c.nodes, goredis.New(cl))
	}
	// Frozen servers must resume before the cleanup kills them, so that
	// the clients' pending commands end.
	t.Cleanup(func() {
		for i := range c.frozen {
			c.thaw(t, i)
		}
	})
	return c
}

// warmServer opens a connection of cl and loads the strategy's scripts into its
// server, retrying for at most 30s, so that a test's first call, bounded by
// a per-node timeout of 50–300ms, neither dials nor falls back from
// EVALSHA to EVAL: on a loaded machine under the race detector that first
// call outlasted its timeout.
func warmServer(t testing.TB, cl *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for _, src := range strategy.ScriptSourcesForTest() {
		var err error
		for until := time.Now().Add(30 * time.Second); ; {
			if err = cl.ScriptLoad(ctx, src).Err(); err == nil || time.Now().After(until) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, err, "SCRIPT LOAD on %s", cl.Options().Addr)
	}
}

// freeze stops server i with SIGSTOP.
func (c *cluster) freeze(t testing.TB, i int) {
	t.Helper()
	c.servers[i].Freeze(t)
	c.frozen[i] = true
}

// thaw resumes server i.
func (c *cluster) thaw(t testing.TB, i int) {
	t.Helper()
	if c.frozen[i] {
		c.servers[i].Thaw(t)
		delete(c.frozen, i)
	}
}

func (c *cluster) redlock(t testing.TB, opts ...strategy.Option) *strategy.Redlock {
	t.Helper()
	r, err := strategy.NewRedlock(c.nodes, opts...)
	require.NoError(t, err)
	return r.(*strategy.Redlock)
}

// holder returns the token holding key on server i ("" when none).
func (c *cluster) holder(t testing.TB, i int, key string) string {
	t.Helper()
	return lockHolder(t, c.clients[i], key)
}

func lockKey(key string) string  { l, _ := strategy.Keys(key); return l }
func fenceKey(key string) string { _, f := strategy.Keys(key); return f }

// lockHolder returns the token that holds key on the server of rc, or "".
func lockHolder(t testing.TB, rc *redis.Client, key string) string {
	t.Helper()
	v, err := rc.Get(context.Background(), lockKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	_, token, ok := strings.Cut(v, ":")
	require.True(t, ok, "lock value %q is not <fence>:<token>", v)
	return token
}

// holdsAll reports whether token holds key on every server; token ""
// reports whether no server has the lock.
func (c *cluster) holdsAll(t testing.TB, key, token string) bool {
	for i := range c.servers {
		if c.holder(t, i, key) != token {
			return false
		}
	}
	return true
}

// acquireThenLose acquires key for token through r, waits until every
// server has it, and deletes it on the first lost servers.
func (c *cluster) acquireThenLose(t testing.TB, r *strategy.Redlock, key, token string, lost int) {
	t.Helper()
	ctx := context.Background()
	_, err := r.Acquire(ctx, key, token, 5*time.Second)
	require.NoError(t, err)
	require.True(t, eventually(time.Second, func() bool { return c.holdsAll(t, key, token) }))
	for i := range lost {
		require.NoError(t, c.clients[i].Del(ctx, lockKey(key)).Err())
	}
}

// counter returns the fencing counter of key's slot on server i.
func (c *cluster) counter(t testing.TB, i int, key string) int64 {
	t.Helper()
	v, err := c.clients[i].Get(context.Background(), fenceKey(key)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return v
}

// lossyNode runs every script on the real node and then reports its reply
// lost, like a connection that breaks after the command went out.
type lossyNode struct{ driver.Node }

var errLost = errors.New("test: reply lost")

func (n lossyNode) Run(ctx context.Context, calls []driver.Call) {
	n.Node.Run(ctx, calls)
	for i := range calls {
		if calls[i].Err == nil {
			calls[i].Reply, calls[i].Err = nil, errLost
		}
	}
}

func (n lossyNode) String() string { return "lossy " + n.Node.(interface{ String() string }).String() }

// countingNode counts the calls in flight through it.
type countingNode struct {
	driver.Node
	inflight *atomic.Int32
}

func (n countingNode) Run(ctx context.Context, calls []driver.Call) {
	n.inflight.Add(1)
	defer n.inflight.Add(-1)
	n.Node.Run(ctx, calls)
}

func (n countingNode) String() string { return n.Node.(interface{ String() string }).String() }

// sliceNode is a Node type whose values cannot be compared with ==.
type sliceNode struct {
	driver.Node
	tags []string
}

func (n sliceNode) String() string { return n.tags[0] }

// eventually polls cond every 10ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signalNode sends on ran (without blocking) after each of its calls on
// key that the server answered.
type signalNode struct {
	driver.Node
	key string
	ran chan struct{}
}

func (n signalNode) Run(ctx context.Context, calls []driver.Call) {
	n.Node.Run(ctx, calls)
	if calls[0].Err == nil && len(calls[0].Keys) > 0 && calls[0].Keys[0] == n.key {
		select {
		case n.ran <- struct{}{}:
		default:
		}
	}
}

func (n signalNode) String() string { return n.Node.(interface{ String() string }).String() }

// deafNode ignores its context: it answers only after delay.
type deafNode struct {
	driver.Node
	delay time.Duration
}

func (n deafNode) Run(_ context.Context, calls []driver.Call) {
	time.Sleep(n.delay)
	n.Node.Run(context.Background(), calls)
}

func (n deafNode) String() string { return "deaf " + n.Node.(interface{ String() string }).String() }
