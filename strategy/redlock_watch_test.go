package strategy_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmtest"
	"github.com/dlmgo/dlm/strategy"
)

// TestRedlockWakeAfterStaggeredRelease: a release that reaches the nodes
// one after another still wakes another process's waiter in time. Woken
// by the first node's message, the waiter would be refused by the nodes the
// release had not reached yet, and their messages, taken for the same
// release, would not wake it again: it would wait for its poll (a minute
// here). In virtual time, with the release's requests held 0–40ms per node.
func TestRedlockWakeAfterStaggeredRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var servers []*dlmtest.Server
		var holderNodes, waiterNodes []driver.Node
		for range 5 {
			srv := dlmtest.NewServer()
			servers = append(servers, srv)
			holderNodes = append(holderNodes, srv.Node())
			waiterNodes = append(waiterNodes, srv.Node())
		}
		defer func() {
			time.Sleep(time.Minute)
			for _, srv := range servers {
				srv.Close()
			}
		}()
		newManager := func(nodes []driver.Node) *dlm.Manager {
			r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
			require.NoError(t, err)
			m, err := dlm.New(r, dlm.WithTTL(time.Hour), dlm.WithRetryDelay(time.Minute, time.Minute))
			require.NoError(t, err)
			return m
		}
		holderM, waiterM := newManager(holderNodes), newManager(waiterNodes)
		ctx := context.Background()
		holder, err := holderM.TryLock(ctx, "k")
		require.NoError(t, err)
		got := make(chan *dlm.Lock, 1)
		go func() {
			l, err := waiterM.Lock(ctx, "k")
			assert.NoError(t, err)
			got <- l
		}()
		time.Sleep(time.Second) // the waiter subscribed, tried and was refused (marking the lock)
		for i, n := range holderNodes {
			n.(*dlmtest.Node).SetFaults(func(reply bool) dlmtest.Fault {
				if reply {
					return dlmtest.Fault{}
				}
				return dlmtest.Fault{Delay: time.Duration(i) * 10 * time.Millisecond}
			})
		}
		released := time.Now()
		require.NoError(t, holder.Unlock(ctx))
		select {
		case l := <-got:
			assert.Less(t, time.Since(released), time.Second, "woken by the release, not by the minute's poll")
			assert.Greater(t, l.Fence(), holder.Fence())
			require.NoError(t, l.Unlock(ctx))
		case <-time.After(2 * time.Minute):
			t.Fatal("the waiter did not get the lock")
		}
	})
}

// TestRedlockWatchCoalesces: the messages of one release notify once, at
// the quorum's; fewer than a quorum notify once the per-node timeout has
// passed since the first; a second message from one node is another
// release. In virtual time.
func TestRedlockWatchCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var servers []*dlmtest.Server
		var nodes []driver.Node
		for range 5 {
			srv := dlmtest.NewServer()
			servers = append(servers, srv)
			nodes = append(nodes, srv.Node())
		}
		defer func() {
			time.Sleep(time.Minute)
			for _, srv := range servers {
				srv.Close()
			}
		}()
		r, err := strategy.NewRedlock(nodes, strategy.WithTimeout(time.Second))
		require.NoError(t, err)
		var woken atomic.Int32
		stop, err := r.WatchRelease(context.Background(), "k", func() { woken.Add(1) })
		require.NoError(t, err)
		defer stop()
		channel, _ := strategy.Keys("k")
		publish := func(i int) {
			_, err := servers[i].Do("PUBLISH", channel, "")
			require.NoError(t, err)
			synctest.Wait()
		}
		publish(0)
		publish(1)
		assert.Zero(t, woken.Load(), "two of five nodes have released")
		publish(2)
		assert.Equal(t, int32(1), woken.Load(), "a quorum has released")
		publish(3)
		publish(4)
		assert.Equal(t, int32(1), woken.Load(), "the same release")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, int32(1), woken.Load(), "no second notification at the timeout")

		publish(1)
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, int32(1), woken.Load(), "one node: wait for the others")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		assert.Equal(t, int32(2), woken.Load(), "the timeout notifies")

		publish(2)
		publish(2)
		assert.Equal(t, int32(3), woken.Load(), "a second message from one node: the first release's round ends")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, int32(4), woken.Load(), "the second's times out")
	})
}
