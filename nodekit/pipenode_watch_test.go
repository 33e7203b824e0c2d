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

// eventually waits up to 5s for cond.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func TestPipeNodeWatch(t *testing.T) {
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
					case <-time.After(5 * time.Second):
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
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		srv := redistest.Start(t)
		n := d.node(t, pipeOptions{addrs: []string{srv.Addr}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := n.Watch(ctx, "canceled", func(string) {})
		assert.ErrorIs(t, err, context.Canceled)

		// A server that never confirms: Watch returns at the deadline.
		_, err = eval(context.Background(), n, "return {1}")
		require.NoError(t, err)
		srv.Freeze(t)
		dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer dcancel()
		start := time.Now()
		_, err = n.Watch(dctx, "frozen", func(string) {})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 2*time.Second)
		srv.Thaw(t)

		// The subscription given up is no debt: the channel can be watched
		// again at once, and Watch returns once it is confirmed.
		for _, ch := range []string{"frozen", "canceled"} {
			got := make(chan string, 1)
			wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
			stop, err := n.Watch(wctx, ch, func(p string) { got <- p })
			wcancel()
			require.NoError(t, err, ch)
			require.Equal(t, int64(1), srv.Client(t).Publish(context.Background(), ch, "again").Val(), ch)
			assert.Equal(t, "again", <-got, ch)
			stop()
		}

		// A closed client: Watch fails at once, not when ctx ends.
		closed := d.open(t, pipeOptions{addrs: []string{srv.Addr}})
		closed.close()
		cn := closed.node
		start = time.Now()
		_, err = cn.Watch(context.Background(), "ch", func(string) {})
		assert.ErrorIs(t, err, d.errClosing)
		assert.Less(t, time.Since(start), 2*time.Second)
	})
}

// A server that refuses SUBSCRIBE (an ACL user without the channel): Watch
// fails at once with the server's error, and other channels still work.
func TestPipeNodeWatchRefused(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		srv := redistest.Start(t)
		c := srv.Client(t)
		ctx := context.Background()
		require.NoError(t, c.Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "resetchannels", "&allowed", "+@all", "~*").Err())
		n := d.node(t, pipeOptions{addrs: []string{srv.Addr}, username: "limited", password: "pw"})
		start := time.Now()
		_, err := n.Watch(ctx, "forbidden", func(string) {})
		assert.ErrorContains(t, err, "NOPERM")
		assert.Less(t, time.Since(start), 2*time.Second)
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

func TestPipeNodeWatchCluster(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d pipeDriver) {
		nodes := redistest.StartCluster(t, 3)
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
	})
}
