package strategy_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlmgo/dlm/driver"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/driver/goredis"
	"github.com/dlmgo/dlm/internal/redistest"
	"github.com/dlmgo/dlm/strategy"
)

// failoverCountingNode is a go-redis node that counts its Run calls, each a
// round trip (every other method is the node's own).
type failoverCountingNode struct {
	driver.Node
	batches *atomic.Int32
}

func (n failoverCountingNode) Run(ctx context.Context, calls []driver.Call) {
	n.batches.Add(1)
	n.Node.Run(ctx, calls)
}

// failoverNotNotifier is a node that cannot watch.
type failoverNotNotifier struct{ driver.Node }

func (failoverNotNotifier) Watch(context.Context, string, func(string)) (func(), error) {
	return nil, errors.ErrUnsupported
}

func TestFailoverLifecycle(t *testing.T) {
	topo := redistest.StartReplicated(t, redistest.ReplicatedOptions{Replicas: 1})
	primary := topo.Primary.Client(t)
	replica := topo.Replicas[0].Client(t)
	ctx := context.Background()
	const ttl = 10 * time.Second
	var batches atomic.Int32
	node := failoverCountingNode{Node: goredis.New(primary), batches: &batches}

	for _, tc := range []struct {
		name    string
		acks    strategy.AckPolicy
		batches int32 // Run calls one ExtendMany makes (AckAll makes a RunWait)
	}{{"AckAll", strategy.AckAll(), 0}, {"AckNone", strategy.AckNone(), 1}} {
		t.Run("ExtendMany "+tc.name, func(t *testing.T) {
			f := newFailover(t, node, strategy.WithAcks(tc.acks))
			k := func(s string) string { return tc.name + ":" + s }
			for _, key := range []string{"a", "b"} {
				_, err := f.Acquire(ctx, k(key), "mine", time.Second)
				require.NoError(t, err)
			}
			_, err := f.Acquire(ctx, k("c"), "theirs", time.Second)
			require.NoError(t, err)
			_, err = f.Extend(ctx, k("c"), "theirs", time.Second) // loads the script: no NOSCRIPT round below
			require.NoError(t, err)
			batches.Store(0)
			start := time.Now()
			res := f.ExtendMany(ctx, []driver.HeldKey{
				{Key: k("a"), Token: "mine"}, {Key: k("b"), Token: "mine"},
				{Key: k("c"), Token: "mine"}, {Key: "", Token: "mine"},
			}, ttl)
			require.Len(t, res, 4)
			assert.Equal(t, tc.batches, batches.Load())
			for i, key := range []string{"a", "b"} {
				require.NoError(t, res[i].Err)
				assert.NotZero(t, res[i].Lease.Fence)
				assert.True(t, res[i].Lease.Until.Before(start.Add(ttl)), "validity counted from before the batch")
				pttl, err := primary.PTTL(ctx, "dlm:{"+k(key)+"}").Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, 9*time.Second)
				if tc.acks == strategy.AckAll() {
					// Acknowledged before ExtendMany returned.
					pttl, err := replica.PTTL(ctx, "dlm:{"+k(key)+"}").Result()
					require.NoError(t, err)
					assert.Greater(t, pttl, 9*time.Second, "extension on the replica")
				}
			}
			assert.ErrorIs(t, res[2].Err, dlm.ErrNotHeld)
			assert.ErrorIs(t, res[3].Err, dlm.ErrInvalid)
		})
	}

	t.Run("ExtendMany AckAll with the replica frozen", func(t *testing.T) {
		f := newFailover(t, node, strategy.WithWaitTimeout(50*time.Millisecond))
		_, err := f.Acquire(ctx, "frozen", "mine", ttl)
		require.NoError(t, err)
		freeze(t, topo.Replicas[0])
		res := f.ExtendMany(ctx, []driver.HeldKey{{Key: "frozen", Token: "mine"}}, ttl)
		var ack *strategy.AckError
		require.ErrorAs(t, res[0].Err, &ack, "an unacknowledged extension is not trusted")
		assert.NotErrorIs(t, res[0].Err, dlm.ErrNotHeld)
		thaw(t, topo.Replicas[0])
	})

	t.Run("WatchRelease", func(t *testing.T) {
		_, err := newFailover(t, failoverNotNotifier{goredis.New(primary)}).WatchRelease(ctx, "w", func() {})
		assert.ErrorIs(t, err, errors.ErrUnsupported)

		f := newFailover(t, node)
		var woken atomic.Int32
		stop, err := f.WatchRelease(ctx, "w", func() { woken.Add(1) })
		require.NoError(t, err)
		defer stop()
		_, err = f.Acquire(ctx, "w", "tok", ttl)
		require.NoError(t, err)
		_, err = f.Acquire(ctx, "w", "waiter", ttl)
		require.ErrorIs(t, err, dlm.ErrNotAcquired, "a waiter, for whom the release publishes")
		require.NoError(t, f.Release(ctx, "w", "tok"))
		require.True(t, eventually(3*time.Second, func() bool { return woken.Load() == 1 }), "one notification after the release")
	})
}
