package nodekit_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm/internal/redistest"
)

// numsub is how many connections of the server subscribe to channel.
func numsub(t *testing.T, c *redis.Client, channel string) int64 {
	t.Helper()
	m, err := c.PubSubNumSub(context.Background(), channel).Result()
	require.NoError(t, err)
	return m[channel]
}

// eventually waits up to a minute for cond, polling: only a failure waits
// that long, and a loaded machine does not make one.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestPipeNodeWatch(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		for _, tc := range []struct {
			name string
			opt  pipeOptions
		}{
			{"autopipelining", pipeOptions{}},
			{"pool", pipeOptions{noAutoPipelining: true}},
			{"noretry", pipeOptions{noRetry: true}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv := redistest.Start(t)
				c := srv.Client(t)
				tc.opt.addrs = []string{srv.Addr}
				n := d.node(t, tc.opt)
				var _ driver.Node = n
				ctx := context.Background()
				got1, got2 := make(chan string, 10), make(chan string, 10)
				stop1, err := n.Watch(ctx, "ch", func(p string) { got1 <- p })
				require.NoError(t, err)
				stop2, err := n.Watch(ctx, "ch", func(p string) { got2 <- p })
				require.NoError(t, err)
				// Confirmed subscription: a message published right after Watch
				// returns arrives.
				require.Equal(t, int64(1), c.Publish(ctx, "ch", "one").Val(), "one subscription for both watchers")
				assert.Equal(t, "one", <-got1)
				assert.Equal(t, "one", <-got2)

				stop1()
				stop1() // idempotent
				require.NoError(t, c.Publish(ctx, "ch", "two").Err())
				assert.Equal(t, "two", <-got2)
				stop2()
				assert.True(t, eventually(func() bool { return numsub(t, c, "ch") == 0 }), "UNSUBSCRIBE sent once the last watcher stopped")
				require.NoError(t, c.Publish(ctx, "ch", "three").Err())
				// Real time, the subject: 50ms in which stopped watchers
				// must receive nothing (a message arrives in well under a
				// millisecond on loopback).
				time.Sleep(50 * time.Millisecond)
				assert.Empty(t, got1)
				assert.Empty(t, got2)

				// Stopping and watching again at once: the old subscription's
				// UNSUBSCRIBE must not end the new one.
				for i := range 20 {
					got := make(chan string, 1)
					stop, err := n.Watch(ctx, "ch", func(p string) { got <- p })
					require.NoError(t, err)
					require.NoError(t, c.Publish(ctx, "ch", strconv.Itoa(i)).Err())
					select {
					case p := <-got:
						assert.Equal(t, strconv.Itoa(i), p)
					case <-time.After(atOnce): // only a lost message waits this long
						t.Fatalf("round %d: message not delivered", i)
					}
					stop()
				}
				assert.True(t, eventually(func() bool { return numsub(t, c, "ch") == 0 }))
			})
		}
	})
}

func TestPipeNodeWatchCancelled(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		srv := redistest.Start(t)
		n := d.node(t, pipeOptions{addrs: []string{srv.Addr}, connWriteTimeout: slowClient})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := n.Watch(ctx, "canceled", func(string) {})
		assert.ErrorIs(t, err, context.Canceled)

		// A server that never confirms: Watch returns at the deadline.
		_, err = runSource(context.Background(), n, "return {1}")
		require.NoError(t, err)
		srv.Freeze(t)
		dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer dcancel()
		start := time.Now()
		_, err = n.Watch(dctx, "frozen", func(string) {})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), atOnce, "at the deadline, not at the client's timeout (slowClient)")
		srv.Thaw(t)

		// The subscription given up is no debt: the channel can be watched
		// again at once, and Watch returns once it is confirmed.
		for _, ch := range []string{"frozen", "canceled"} {
			got := make(chan string, 1)
			wctx, wcancel := context.WithTimeout(context.Background(), atOnce)
			stop, err := n.Watch(wctx, ch, func(p string) { got <- p })
			wcancel()
			require.NoError(t, err, ch)
			require.Equal(t, int64(1), srv.Client(t).Publish(context.Background(), ch, "again").Val(), ch)
			assert.Equal(t, "again", <-got, ch)
			stop()
		}

		// A closed client: Watch fails at once, not when ctx ends (then
		// the error would be the context's).
		closed := d.open(t, pipeOptions{addrs: []string{srv.Addr}})
		closed.close()
		cn := closed.node
		cctx, ccancel := context.WithTimeout(context.Background(), 2*atOnce)
		defer ccancel()
		start = time.Now()
		_, err = cn.Watch(cctx, "ch", func(string) {})
		assert.ErrorIs(t, err, d.errClosing)
		assert.Less(t, time.Since(start), atOnce)
	})
}

// A server that refuses SUBSCRIBE (an ACL user without the channel): Watch
// fails at once with the server's error, and other channels still work.
func TestPipeNodeWatchRefused(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		ctx := context.Background()
		require.NoError(t, c.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "resetchannels", "&allowed", "+@all", "~*").Err())
		n := d.node(t, pipeOptions{addrs: []string{srv.Addr}, username: "limited", password: "pw"})
		wctx, cancel := context.WithTimeout(ctx, 2*atOnce)
		defer cancel()
		start := time.Now()
		_, err := n.Watch(wctx, "forbidden", func(string) {})
		assert.ErrorContains(t, err, "NOPERM", "the server's error, not the context's end")
		assert.Less(t, time.Since(start), atOnce)
		got := make(chan string, 1)
		stop, err := n.Watch(ctx, "allowed", func(p string) { got <- p })
		require.NoError(t, err)
		defer stop()
		require.NoError(t, c.Publish(ctx, "allowed", "yes").Err())
		assert.Equal(t, "yes", <-got)
	})
}

// The connection breaks; the subscription comes back on a new one.
func TestPipeNodeWatchReconnect(t *testing.T) {
	t.Parallel() // each driver owns its servers
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		n := d.node(t, pipeOptions{addrs: []string{srv.Addr}})
		ctx := context.Background()
		got := make(chan string, 100)
		stop, err := n.Watch(ctx, "ch", func(p string) { got <- p })
		require.NoError(t, err)
		defer stop()
		killed, err := c.ClientKillByFilter(ctx, "TYPE", "pubsub").Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), killed, "the subscribed connection was killed")
		require.True(t, eventually(func() bool { return numsub(t, c, "ch") == 1 }), "subscribed again")
		require.NoError(t, c.Publish(ctx, "ch", "back").Err())
		assert.Equal(t, "back", <-got)
	})
}

// clusterWatch: on a Cluster of three masters, Watch subscribes channels
// of keys on every master, and shard messages published there arrive. Run
// by TestPipeNodeCluster.
func clusterWatch(t *testing.T, d pipeDriver, nodes []*redistest.Server) {
	n := d.node(t, pipeOptions{addrs: []string{nodes[0].Addr}})
	pub := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[1].Addr}})
	defer pub.Close()
	ctx := context.Background()
	var count atomic.Int64
	for i := range 6 {
		ch := "dlm:{k" + strconv.Itoa(i) + "}"
		stop, err := n.Watch(ctx, ch, func(string) { count.Add(1) })
		require.NoError(t, err)
		defer stop()
		// Published on its shard, as the release script does.
		require.NoError(t, pub.SPublish(ctx, ch, "released").Err())
	}
	assert.True(t, eventually(func() bool { return count.Load() == 6 }), "got %d of 6", count.Load())
}
