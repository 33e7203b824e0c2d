package goredis_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/eval"
	"github.com/dlmgo/dlm/internal/redistest"
)

// pubsubClients counts the server's connections in pub/sub mode.
func pubsubClients(t *testing.T, c *redis.Client) int {
	list, err := c.ClientList(context.Background()).Result()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			n++
		}
	}
	return n
}

// TestWatch: watchers of a channel share one subscription connection,
// stopping a watcher stops its deliveries, and the connection closes once
// unused for nodekit.HubLinger and reopens on demand. Two waits are real
// time because they are the subject: 50ms in which a stopped watcher must
// receive nothing (a message would arrive in well under a millisecond on
// loopback), and the linger itself, polled (up to a minute, for a loaded
// machine) until the server counts no subscriber.
func TestWatch(t *testing.T) {
	t.Parallel() // owns its servers
	c := redistest.Start(t).Client(t)
	n := goredis.New(c)
	var _ driver.Node = n
	ctx := context.Background()
	got1, got2 := make(chan string, 10), make(chan string, 10)
	stop1, err := n.Watch(ctx, "ch", func(p string) { got1 <- p })
	require.NoError(t, err)
	stop2, err := n.Watch(ctx, "ch", func(p string) { got2 <- p })
	require.NoError(t, err)
	// Confirmed subscription: a message published right after Watch returns
	// arrives.
	require.NoError(t, c.Publish(ctx, "ch", "one").Err())
	assert.Equal(t, "one", <-got1)
	assert.Equal(t, "one", <-got2)
	assert.Equal(t, 1, pubsubClients(t, c), "one connection for all channels")

	stop1()
	stop1() // idempotent
	require.NoError(t, c.Publish(ctx, "ch", "two").Err())
	assert.Equal(t, "two", <-got2)
	stop2()
	require.NoError(t, c.Publish(ctx, "ch", "three").Err())
	time.Sleep(50 * time.Millisecond)
	assert.Empty(t, got1)
	assert.Empty(t, got2)
	// The connection closes once unused for a while.
	deadline := time.Now().Add(time.Minute)
	for pubsubClients(t, c) != 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	assert.Zero(t, pubsubClients(t, c), "idle subscription connection closed")
	// and reopens on demand.
	stop, err := n.Watch(ctx, "ch", func(p string) { got1 <- p })
	require.NoError(t, err)
	defer stop()
	require.NoError(t, c.Publish(ctx, "ch", "four").Err())
	assert.Equal(t, "four", <-got1)
}

func TestWatchCancelled(t *testing.T) {
	t.Parallel() // owns its servers
	n := goredis.New(redistest.Start(t).Client(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Watch(ctx, "ch", func(string) {})
	assert.ErrorIs(t, err, context.Canceled)
}

// watchCluster: on a Cluster, Watch subscribes channels of keys on every
// master, and shard messages published there arrive. Run by TestCluster.
func watchCluster(t *testing.T, nodes []*redistest.Server) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	defer c.Close()
	n := goredis.New(c)
	ctx := context.Background()
	var count atomic.Int64
	// Channels of keys on every master, published on their shards as the
	// release script does.
	for i := range 6 {
		ch := "dlm:{k" + strconv.Itoa(i) + "}"
		stop, err := n.Watch(ctx, ch, func(string) { count.Add(1) })
		require.NoError(t, err)
		defer stop()
		require.NoError(t, c.SPublish(ctx, ch, "released").Err())
	}
	deadline := time.Now().Add(time.Minute) // polled: a loaded machine delays delivery
	for count.Load() < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, int64(6), count.Load())
}

// TestRunMany: runMany on a client of a server of its own, with and
// without a deadline on the context (go-redis's client has no
// ContextTimeoutEnabled: the driver makes the deadline real). On a
// Cluster it runs in TestCluster.
func TestRunMany(t *testing.T) {
	t.Parallel() // owns its servers
	for _, tc := range []struct {
		name     string
		deadline bool
	}{{"client", false}, {"client-noctxtimeout-deadline", true}} {
		t.Run(tc.name, func(t *testing.T) {
			runMany(t, redistest.Start(t).Client(t), tc.deadline)
		})
	}
}

// runMany runs a script not yet cached, through c, as many calls: RunMany
// loads it, and every call runs once and in order; a call that fails
// does not fail the others. With deadline the context has one.
func runMany(t *testing.T, c redis.UniversalClient, deadline bool) {
	n := goredis.New(c)
	s := eval.NewScript("return {tonumber(ARGV[1]), redis.call('INCR', KEYS[1])}")
	ctx := context.Background()
	if deadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute) // a deadline to honour, not a bound
		defer cancel()
	}
	calls := make([]driver.Call, 50)
	for i := range calls {
		calls[i] = driver.Call{Keys: []string{"k" + strconv.Itoa(i%7)}, Args: []string{strconv.Itoa(i)}}
	}
	// The script is not cached: the first pipeline meets NOSCRIPT,
	// RunMany loads it and runs the rest again.
	s.RunMany(ctx, n, calls)
	perKey := map[string]int64{}
	for i, r := range calls {
		require.NoError(t, r.Err, "call %d", i)
		require.Len(t, r.Reply, 2)
		assert.Equal(t, int64(i), r.Reply[0])
		perKey[calls[i].Keys[0]]++
		assert.Equal(t, perKey[calls[i].Keys[0]], r.Reply[1], "call %d ran once, in order", i)
	}
	// A call that fails does not fail the others.
	bad := eval.NewScript("if ARGV[1] == 'x' then return redis.error_reply('boom') end return {1}")
	res := []driver.Call{{Keys: []string{"a"}, Args: []string{"1"}}, {Keys: []string{"a"}, Args: []string{"x"}}, {Keys: []string{"a"}, Args: []string{"2"}}}
	bad.RunMany(ctx, n, res)
	assert.NoError(t, res[0].Err)
	assert.ErrorContains(t, res[1].Err, "boom")
	assert.NoError(t, res[2].Err)
}

// TestRunManyDeadline: calls on a frozen server end at the context's
// deadline, through a client without ContextTimeoutEnabled whose
// ReadTimeout (a minute) would hold them longer. The bound is half that
// ReadTimeout, which a loaded machine does not reach (it was 2s against
// go-redis's default 3s ReadTimeout).
func TestRunManyDeadline(t *testing.T) {
	t.Parallel() // owns its servers
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute}) // without ContextTimeoutEnabled
	t.Cleanup(func() { _ = c.Close() })
	n := goredis.New(c)
	require.NoError(t, c.Ping(context.Background()).Err())
	srv.Freeze(t)
	defer srv.Thaw(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	calls := []driver.Call{{SHA1: "0000000000000000000000000000000000000000", Keys: []string{"a"}}, {SHA1: "0000000000000000000000000000000000000000", Keys: []string{"b"}}}
	n.Run(ctx, calls)
	for i := range calls {
		assert.ErrorIs(t, calls[i].Err, context.DeadlineExceeded, "call %d", i)
		assert.Nil(t, calls[i].Reply, "call %d", i)
	}
	assert.Less(t, time.Since(start), 30*time.Second, "returned at the deadline, not at the ReadTimeout")
}
